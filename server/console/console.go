// Package console owns the web console served under /ui/ on the discovery listener: pages of
// the fleet, pools, sites, leases and traffic rendered on the server, a login with the
// discovery tokens, and the few actions an admin token may take (drain a Proxy, release a
// lease, clear a cooldown). It reads what the discovery API reads and decides nothing itself.
package console

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Prefix is where the console is served.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every answer: no inline script, nothing from elsewhere,
// no framing (decision 0297).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

// Defaults of zero fields.
const (
	DefaultMaxSessions = 10_000
	DefaultSessionTTL  = 12 * time.Hour
	maxFormBytes       = 16 << 10
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the web console. Discovery must be the process's discovery API: the console
// reads its fleet, verdicts, lease store and sites view.
type Console struct {
	Discovery *discovery.Discovery
	// Tokens are the discovery tokens a login is checked against; Insecure (the discovery
	// API's -discovery-insecure) logs in without one, as a caller with every right.
	Tokens   *access.Tokens
	Insecure bool
	// Leases is the bare lease store, asked for the optional capabilities the console uses
	// (lease.HoldingsLister, lease.CooldownClearer), which wrappers such as
	// lease.WithOutcomes hide (nil: Discovery.Leases).
	Leases lease.Store
	// Pools is what the pool hooks answered last (nil: no pool hooks in this process).
	Pools *poolhook.Seen
	// Kube patches the draining label and records Events (nil: no Kubernetes client here;
	// the drain buttons say NoDrain and actions record no Event).
	Kube    *Kube
	NoDrain string
	// Traffic is the ring of recent counter samples the Traffic page draws (nil: none).
	Traffic *Traffic
	Log     *slog.Logger
	Now     func() time.Time
	// MaxSessions bounds the sessions kept (0: DefaultMaxSessions); SessionTTL is a
	// session's life from its login (0: DefaultSessionTTL).
	MaxSessions int
	SessionTTL  time.Duration

	once     sync.Once
	handler  http.Handler
	sessions *sessions
	pages    map[string]*template.Template
}

func (c *Console) init() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NoDrain == "" {
		c.NoDrain = "no Kubernetes client in this process: drain by labelling the Proxy (kubectl label px NAME " + drainLabelHint + ")"
	}
	c.Discovery.Init()
	if c.Leases == nil {
		c.Leases = c.Discovery.Leases
	}
	c.sessions = newSessions(c.MaxSessions, c.SessionTTL, c.Now)
	c.pages = parsePages()
	static, _ := fs.Sub(staticFS, "static")
	r := chi.NewRouter()
	r.Use(c.headers)
	r.Get("/ui", redirect("/ui/fleet"))
	r.Get("/ui/", redirect("/ui/fleet"))
	r.Handle("/ui/static/*", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	r.Get("/ui/login", c.serve(c.loginPage))
	r.Post("/ui/login", c.serve(c.login))
	r.Group(func(r chi.Router) {
		r.Use(c.session)
		r.Get("/ui/fleet", c.serve(c.fleetPage))
		r.Get("/ui/pools", c.serve(c.poolsPage))
		r.Get("/ui/sites", c.serve(c.sitesPage))
		r.Get("/ui/leases", c.serve(c.leasesPage))
		r.Get("/ui/traffic", c.serve(c.trafficPage))
		r.Group(func(r chi.Router) {
			r.Use(c.checkPost)
			r.Post("/ui/logout", c.serve(c.logout))
			r.Post("/ui/proxies/drain", c.serve(c.drain))
			r.Post("/ui/leases/release", c.serve(c.release))
			r.Post("/ui/sites/clear", c.serve(c.clearCooldown))
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, httpx.Errorf(http.StatusNotFound, "no page %s", r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, httpx.Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path))
	})
	c.handler = r
}

// ServeHTTP serves every path under /ui.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.once.Do(c.init)
	c.handler.ServeHTTP(w, r)
}

// headers sets what every answer carries: the policy, no sniffing, no framing, no caching
// of pages that hold fleet data.
func (c *Console) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func redirect(to string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusSeeOther) }
}

// serve adapts a handler that returns an error: an *httpx.Error is shown as a page with its
// message, anything else is logged and shown as an internal error.
func (c *Console) serve(h httpx.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if errors.Is(err, lease.ErrUnavailable) {
			// A shared store that is out: nothing was read or done, a reload may work.
			err = &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: 1, Err: err,
				Message: "the lease store (or the fleet it holds) is unavailable: reload in a moment"}
		}
		if err != nil {
			c.renderError(w, r, err)
		}
	}
}
