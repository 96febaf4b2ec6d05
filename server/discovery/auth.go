package discovery

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Tokens returns the discovery tokens: the tokens file when a path is given (a mounted
// Secret: one token per line, or the YAML form of access.Load), else env (DISCOVERY_TOKEN) as
// one token with lease rights everywhere. Neither is an error unless insecure: the API is
// never open by default. A blank token, in the file or in env, is an error too.
func Tokens(env, file string, insecure bool) (*access.Tokens, error) {
	switch {
	case file != "":
		return access.Load(file)
	case env != "":
		t, err := access.New([]access.TokenSpec{{Name: "DISCOVERY_TOKEN", Token: env,
			Namespaces: []string{access.AllNamespaces}, Right: access.RightLease}})
		if err != nil {
			return nil, fmt.Errorf("DISCOVERY_TOKEN: %w", err)
		}
		return t, nil
	case insecure:
		return nil, nil
	}
	return nil, errors.New("discovery API has no token: give -discovery-token-file (a mounted Secret) or DISCOVERY_TOKEN, " +
		"or pass -discovery-insecure to serve it without auth (only on a trusted address such as 127.0.0.1)")
}

// auth guards every /v1 path, including unknown ones, so an unauthenticated caller learns
// nothing about the routes, and puts the caller in the request's context. Tokens are
// compared by hash in constant time and never logged.
func (d *Discovery) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !(r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/")) {
			next.ServeHTTP(w, r)
			return
		}
		if d.Insecure {
			next.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), access.Insecure)))
			return
		}
		if wait := d.Logins.Wait(r); wait > 0 {
			d.unauth.WithLabelValues(reasonThrottled).Inc()
			httpx.WriteThrottled(w, r, wait)
			return
		}
		var caller *access.Caller
		err := access.ErrInvalidToken
		if d.tokens != nil {
			caller, err = d.tokens.Authenticate(r)
		}
		switch {
		case errors.Is(err, access.ErrNoToken):
			d.unauthorized(w, r, reasonMissingToken)
			w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator"`)
			httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "missing bearer token"))
			return
		case err != nil:
			d.unauthorized(w, r, reasonInvalidToken)
			w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator", error="invalid_token"`)
			httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "invalid bearer token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), caller)))
	})
}

// Reasons of a refusal, the label of proxy_operator_discovery_unauthorized_total.
const (
	reasonMissingToken = "missing_token"
	reasonInvalidToken = "invalid_token"
	reasonThrottled    = "throttled"
)

// unauthorized counts a 401 against the source address (the throttle logs it, sampled, with
// the path, method and remote address; never the token or any other header) and closes the
// connection after the answer, so the server does not first read what is left of a body a
// caller without a token may be trickling.
func (d *Discovery) unauthorized(w http.ResponseWriter, r *http.Request, reason string) {
	d.unauth.WithLabelValues(reason).Inc()
	d.Logins.Failed(r, reason)
	httpx.CloseAfterAnswer(w, r)
}

// mayLease refuses a caller without the lease right (a read-only token). A lease ID is a
// capability: only a caller that could lease in the proxy's namespace was ever given it.
func mayLease(r *http.Request) error {
	c := access.FromContext(r.Context())
	if !c.MayLeaseSomewhere() {
		name := "this caller"
		if c != nil {
			name = "token " + c.Name
		}
		return httpx.Errorf(http.StatusForbidden, "%s may read, not lease", name)
	}
	return nil
}
