package hooks

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Reasons of a 401, the label of proxy_operator_hook_unauthorized_total.
const (
	reasonMissingToken = "missing_token"
	reasonInvalidToken = "invalid_token"
	reasonThrottled    = "throttled"
)

// openPaths answer GET without a token: the kubelet's probes and Prometheus reach them, and
// none changes anything (decision 0180).
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// tokenGate refuses, with 401, every call but a GET of openPaths that does not carry
// "Authorization: Bearer <token>", the header Metacontroller sends from a CompositeController's
// authorization.secretRef (metacontroller/metacontroller@v4.17.2:pkg/hooks/auth.go: the type,
// a space, the trimmed Secret value). It runs before the body is read, so an unauthenticated
// caller costs no memory budget and no call slot. Tokens are compared by hash in constant
// time and never logged.
type tokenGate struct {
	want [sha256.Size]byte
	next http.Handler
	h    *Hooks
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && openPaths[r.URL.Path] {
		g.next.ServeHTTP(w, r)
		return
	}
	if wait := g.h.Logins.Wait(r); wait > 0 {
		g.h.unauth.WithLabelValues(reasonThrottled).Inc()
		httpx.WriteThrottled(w, r, wait)
		return
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		g.refuse(w, r, reasonMissingToken, `Bearer realm="proxy-operator-hooks"`, "missing bearer token")
		return
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], g.want[:]) != 1 {
		g.refuse(w, r, reasonInvalidToken, `Bearer realm="proxy-operator-hooks", error="invalid_token"`, "invalid bearer token")
		return
	}
	g.next.ServeHTTP(w, r)
}

// refuse counts a 401 against the source address (the throttle logs it, sampled, with path,
// method and remote address; never a header) and closes the connection after the answer: the
// server would otherwise read what is left of the body first, for as long as a caller without
// a token trickles it.
func (g *tokenGate) refuse(w http.ResponseWriter, r *http.Request, reason, challenge, msg string) {
	g.h.unauth.WithLabelValues(reason).Inc()
	g.h.Logins.Failed(r, reason)
	httpx.CloseAfterAnswer(w, r)
	w.Header().Set("WWW-Authenticate", challenge)
	httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "%s", msg))
}

// newUnauthorizedCounter is proxy_operator_hook_unauthorized_total, both reasons at zero.
func newUnauthorizedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_hook_unauthorized_total",
		Help: "Hook listener calls refused for their token, by reason (401: missing_token, invalid_token; 429: throttled, after too many failed logins from the address).",
	}, []string{"reason"})
	c.WithLabelValues(reasonMissingToken)
	c.WithLabelValues(reasonInvalidToken)
	c.WithLabelValues(reasonThrottled)
	return c
}
