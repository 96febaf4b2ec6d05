package console

import (
	"bytes"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// pageNames are the console's pages, each a template file beside layout.html.
var pageNames = []string{"login", "error", "fleet", "pools", "sites", "leases", "traffic"}

// nav is the menu, in order.
var nav = []struct{ Name, Label string }{
	{"fleet", "Fleet"}, {"pools", "Pools"}, {"sites", "Sites"}, {"leases", "Leases"}, {"traffic", "Traffic"},
}

var funcs = template.FuncMap{
	"nav": func() any { return nav },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		d := t.Sub(now).Round(time.Second)
		if d < 0 {
			return (-d).String() + " ago"
		}
		return "in " + d.String()
	},
	"lower": strings.ToLower,
}

func parsePages() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}

// page is what every page's layout reads: who is logged in, the form token, the menu item.
type page struct {
	Title    string
	Active   string
	Caller   string
	Right    string
	Admin    bool
	CSRF     string
	Now      time.Time
	NoDrain  string
	CanDrain bool
}

func (c *Console) pageOf(r *http.Request, name string) page {
	p := page{Title: name, Active: name, Now: c.Now(), CanDrain: c.Kube != nil, NoDrain: c.NoDrain}
	if caller := access.FromContext(r.Context()); caller != nil {
		p.Caller, p.Right, p.Admin = caller.Name, string(caller.Right), caller.MayAdminSomewhere()
	}
	if s := sessionOf(r.Context()); s != nil {
		p.CSRF = s.csrf
	}
	return p
}

// render writes the page name with v, whole or not at all: a template error is a 500 page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, code int, v any) error {
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, v); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
	return nil
}

type errorView struct {
	page
	Code    int
	Message string
}

// renderError shows err as a page: an *httpx.Error's message, or "internal error" for
// anything else, whose cause is logged and not sent.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, err error) {
	var e *httpx.Error
	if !errors.As(err, &e) {
		c.Log.Error("console handler failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &httpx.Error{Code: http.StatusInternalServerError, Message: "internal error"}
	} else if e.Code >= 500 && e.RetryAfter == 0 {
		c.Log.Error("console handler failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	v := errorView{page: c.pageOf(r, "error"), Code: e.Code, Message: e.Message}
	if rerr := c.render(w, r, "error", e.Code, v); rerr != nil {
		c.Log.Error("console error page failed", "err", rerr)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}
