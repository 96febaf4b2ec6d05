// Package server owns the process's HTTP surfaces: the Metacontroller hook server (sync,
// finalize, customize, health and metrics endpoints). Handlers return errors; one place maps
// them to a status code and a JSON body, and causes are logged, never sent. It knows nothing
// of how a decision is made (lifecycle) or how providers talk to their clouds.
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
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
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error whose message is shown to the client.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// handlerFunc is an HTTP handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// errorBody is the JSON every error answer carries.
type errorBody struct {
	Error string `json:"error"`
}

// serve adapts a handlerFunc, mapping its error to a response in one place.
func serve(log *slog.Logger, h handlerFunc) http.HandlerFunc {
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
	writeJSON(w, e.Code, errorBody{Error: e.Message})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// readBody reads at most limit bytes of the request body, answering 413 beyond it.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	b, err := readAll(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", limit)
		}
		return nil, &Error{Code: http.StatusBadRequest, Message: "cannot read request body", Err: err}
	}
	return b, nil
}

// decodeJSON decodes b into v, turning decoder errors into a 400 that names the problem.
func decodeJSON(b []byte, v any, what string) error {
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
			return Errorf(http.StatusBadRequest, "%s: %s", what, err.Error())
		}
	}
	return nil
}
