package discovery

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count and time every request the discovery listener answers, by route pattern
// (never the raw path: a lease ID in a label would grow without bound), method and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics() *httpMetrics {
	return &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_discovery_requests_total",
			Help: "Discovery API requests answered, by route pattern (\"other\" for unknown paths), method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_operator_discovery_request_duration_seconds",
			Help:    "Time to answer a discovery API request, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method"}),
	}
}

// knownMethods keeps the method label bounded: anything else is "other".
var knownMethods = map[string]bool{http.MethodGet: true, http.MethodPost: true, http.MethodDelete: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodHead: true, http.MethodOptions: true}

// observe is the outermost middleware: it sees the status of every answer, the auth
// middleware's 401s included.
func (m *httpMetrics) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := "other"
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if p := rc.RoutePattern(); p != "" && p != "/*" {
				route = p
			}
		}
		method := r.Method
		if !knownMethods[method] {
			method = "other"
		}
		m.requests.WithLabelValues(route, method, strconv.Itoa(sw.code)).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
