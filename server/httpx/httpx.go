// Package httpx holds what every HTTP surface of the process shares: the error type handlers
// return and the one place that maps it to a status code and a JSON body (causes are logged,
// never sent), bounded body reading, strict JSON decoding, and the router defaults (/healthz,
// the 404 and 405 answers). It knows no route of its own and no domain type.
package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Error is an error with the HTTP status and the message the client should see.
type Error struct {
	Code    int
	Message string
	// RetryAfter, for 429 and 503, is sent as the Retry-After header in seconds.
	RetryAfter int
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil && !strings.HasSuffix(e.Message, e.Err.Error()) {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error whose message is shown to the client.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds an Error for a cause the client may see: the message is the formatted text,
// ": ", and err's text, and err stays reachable with errors.Is and errors.As.
func Wrap(code int, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...) + ": " + err.Error(), Err: err}
}

// HandlerFunc is an HTTP handler that returns its error instead of writing it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ErrorBody is the JSON every error answer carries.
type ErrorBody struct {
	Error string `json:"error"`
}

// Serve adapts a HandlerFunc, mapping its error to a response in one place: an *Error is
// answered as it says, anything else is a logged 500 whose cause is not sent.
func Serve(log *slog.Logger, h HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			log.Error("handler failed", "method", r.Method, "path", r.URL.Path, "err", err)
			e = &Error{Code: http.StatusInternalServerError, Message: "internal error"}
		} else if e.Code >= 500 && e.RetryAfter == 0 {
			log.Error("handler failed", "method", r.Method, "path", r.URL.Path, "err", err)
		} else {
			log.Debug("request rejected", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
		}
		WriteError(w, e)
	}
}

// WriteError writes e as a JSON error answer.
func WriteError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	WriteJSON(w, e.Code, ErrorBody{Error: e.Message})
}

// WriteJSON writes v as a JSON answer with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// NewRouter returns a chi router with the defaults every surface shares: the given
// middlewares, GET /healthz, and JSON 404 and 405 answers.
func NewRouter(middlewares ...func(http.Handler) http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Use(middlewares...)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

// ReadBody reads at most limit bytes of the request body, answering 413 beyond it.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength < 1<<20 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := io.Copy(&buf, r.Body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", limit)
		}
		return nil, &Error{Code: http.StatusBadRequest, Message: "cannot read request body", Err: err}
	}
	return buf.Bytes(), nil
}

// DecodeJSON decodes b into v, turning decoder errors into a 400 that names the problem.
func DecodeJSON(b []byte, v any, what string) error {
	if len(b) == 0 {
		return Errorf(http.StatusBadRequest, "%s: empty body", what)
	}
	if err := json.Unmarshal(b, v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return Errorf(http.StatusBadRequest, "%s: malformed JSON at byte %d: %s", what, syn.Offset, syn.Error())
		case errors.As(err, &typ):
			field := typ.Field
			if field == "" {
				field = "(top level)"
			}
			return Errorf(http.StatusBadRequest, "%s: field %s: got JSON %s, want %s", what, field, typ.Value, typ.Type)
		default:
			return Wrap(http.StatusBadRequest, err, "%s", what)
		}
	}
	return nil
}
