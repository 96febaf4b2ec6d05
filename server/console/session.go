package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// CookieName is the session cookie: a random session id, never the token.
const CookieName = "proxy_operator_console"

// csrfField is the hidden form field every POST carries.
const csrfField = "csrf"

// session is one login: who, the form token its POSTs must carry, and when it ends.
type session struct {
	caller  *access.Caller
	csrf    string
	expires time.Time
}

// sessions is the server-side table of logins, keyed by a digest of the cookie's id (so a
// lookup's timing says nothing about the id), bounded twice: a token holds at most
// maxPerToken sessions, and a login past either bound takes the place of the session that
// ends first, of that token when it is at its own bound. So a flood of logins with one token
// (any reader's) replaces that token's sessions, not the on-call's.
type sessions struct {
	mu          sync.Mutex
	m           map[[sha256.Size]byte]*session
	max         int
	maxPerToken int
	ttl         time.Duration
	now         func() time.Time
}

// maxSessionsPerToken bounds one token's sessions: more browsers than one person uses.
const maxSessionsPerToken = 64

func newSessions(max int, ttl time.Duration, now func() time.Time) *sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &sessions{m: map[[sha256.Size]byte]*session{}, max: max, maxPerToken: min(max, maxSessionsPerToken), ttl: ttl, now: now}
}

func randomHex() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

// create starts a session for c and returns its id (the cookie's value).
func (s *sessions) create(c *access.Caller) (string, *session) {
	id := randomHex()
	sess := &session{caller: c, csrf: randomHex(), expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	// One pass: drop the ended, count the token's own, find the first to end of the token's
	// and of all.
	var first, firstOwn [sha256.Size]byte
	var firstEnd, firstOwnEnd time.Time
	own := 0
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
			continue
		}
		if firstEnd.IsZero() || v.expires.Before(firstEnd) {
			first, firstEnd = k, v.expires
		}
		if v.caller.Name == c.Name {
			own++
			if firstOwnEnd.IsZero() || v.expires.Before(firstOwnEnd) {
				firstOwn, firstOwnEnd = k, v.expires
			}
		}
	}
	switch {
	case own >= s.maxPerToken:
		delete(s.m, firstOwn)
	case len(s.m) >= s.max:
		delete(s.m, first)
	}
	s.m[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// get is the live session of id (nil: none, or ended).
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.m[k]
	if sess != nil && !s.now().Before(sess.expires) {
		delete(s.m, k)
		return nil
	}
	return sess
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

type sessionKey struct{}

func sessionOf(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

// session sends a request without a live session to the login page, and puts the session
// and its caller in the context of the others.
func (c *Console) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sess *session
		if ck, err := r.Cookie(CookieName); err == nil {
			sess = c.sessions.get(ck.Value)
		}
		if sess == nil {
			if r.Method != http.MethodGet {
				c.renderError(w, r, httpx.Errorf(http.StatusUnauthorized, "not logged in (or the session ended): log in again"))
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, sess)
		next.ServeHTTP(w, r.WithContext(access.WithCaller(ctx, sess.caller)))
	})
}

// checkPost refuses a POST whose form token is not its session's (compared in constant time)
// or whose Origin or Referer, when sent, is another site.
func (c *Console) checkPost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := sameOrigin(r); err != nil {
			c.renderError(w, r, err)
			return
		}
		if err := parseForm(w, r); err != nil {
			c.renderError(w, r, err)
			return
		}
		sess := sessionOf(r.Context())
		got := r.PostFormValue(csrfField)
		if sess == nil || subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			c.renderError(w, r, httpx.Errorf(http.StatusForbidden, "form token missing or stale: reload the page and try again"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// parseForm reads a POST's form, at most maxFormBytes of it: a longer body is a 413 that says
// so, not a form without its fields (which would read as a stale form token or, on the login,
// as a failed login counted against the address).
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	// ParseForm first: ParseMultipartForm drops its error on a body that is not multipart.
	err := r.ParseForm()
	if err == nil {
		if err = r.ParseMultipartForm(maxFormBytes); errors.Is(err, http.ErrNotMultipart) {
			err = nil
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return httpx.Errorf(http.StatusRequestEntityTooLarge, "form over %d bytes refused", maxFormBytes)
	case err != nil:
		return httpx.Errorf(http.StatusBadRequest, "unreadable form")
	}
	return nil
}

var errCrossOrigin = httpx.Errorf(http.StatusForbidden, "cross-origin form refused")

// sameOrigin refuses a request whose Origin (or, without one, Referer) names another host
// than the one asked; a browser sends at least one on a POST from a page.
func sameOrigin(r *http.Request) error {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		if from == "null" {
			return errCrossOrigin
		}
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return nil
	}
	u, err := url.Parse(from)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return errCrossOrigin
	}
	return nil
}

// loginPage shows the login form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) error {
	return c.render(w, r, "login", http.StatusOK, loginView{page: c.pageOf(r, "login"), Next: safeNext(r.URL.Query().Get("next")), Insecure: c.Insecure})
}

type loginView struct {
	page
	Next     string
	Insecure bool
	Failed   bool
}

// login checks the token (through the discovery API's failed-login throttle) and starts a
// session; the cookie holds the session id, never the token.
func (c *Console) login(w http.ResponseWriter, r *http.Request) error {
	if err := sameOrigin(r); err != nil {
		return err
	}
	logins := c.Discovery.Logins
	if wait := logins.Wait(r); wait > 0 {
		return &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: httpx.RetryAfter(wait),
			Message: "too many failed logins from this address: wait and try again"}
	}
	if err := parseForm(w, r); err != nil {
		return err // before the token is read: not a failed login
	}
	tok := r.PostFormValue("token")
	next := safeNext(r.PostFormValue("next"))
	var caller *access.Caller
	switch {
	case c.Insecure:
		caller = access.Insecure
	case c.Tokens != nil:
		caller, _ = c.Tokens.Token(tok) // ErrNoToken or ErrInvalidToken: a failed login either way
	}
	if caller == nil {
		logins.Failed(r, "console_login")
		return c.render(w, r, "login", http.StatusUnauthorized, loginView{page: c.pageOf(r, "login"), Next: next, Failed: true})
	}
	id, _ := c.sessions.create(caller)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/ui/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.sessions.ttl / time.Second)})
	c.Log.Info("console login", "token", caller.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// logout ends the session and clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) error {
	if ck, err := r.Cookie(CookieName); err == nil {
		c.sessions.drop(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/ui/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	return nil
}

// safeNext keeps a post-login destination inside the console (no open redirect).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/fleet"
	}
	return next
}
