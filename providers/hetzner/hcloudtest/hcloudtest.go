// Package hcloudtest owns a local stand-in for the subset of the Hetzner Cloud API the hetzner
// provider uses (create, get, list by name or label selector with pages, delete servers),
// keeping servers in memory with a clock that moves them through initializing, running and
// deleting, and injecting the API's own error answers. Tests point the real hcloud-go client
// at it; it knows nothing of the providers contract.
package hcloudtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Token is the API token the stand-in accepts.
const Token = "hcloud-test-token-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"

// Delays of the server lifecycle, on the stand-in's clock.
const (
	ProvisionDelay = 20 * time.Second
	DeleteDelay    = 10 * time.Second
)

const maxBody = 128 << 10

// Server is one server as the stand-in stores it.
type Server struct {
	ID         int64
	Name       string
	ServerType string
	Image      string
	Location   string
	UserData   string
	Labels     map[string]string
	Firewalls  []int64
	IPv6       bool
	Created    time.Time
	// Deleting is when deletion began.
	Deleting time.Time
	IP       string
}

// Status is the server's status at now, and whether it still exists.
func (s *Server) Status(now time.Time) (string, bool) {
	switch {
	case !s.Deleting.IsZero() && !now.Before(s.Deleting.Add(DeleteDelay)):
		return "", false
	case !s.Deleting.IsZero():
		return "deleting", true
	case now.Before(s.Created.Add(ProvisionDelay)):
		return "initializing", true
	default:
		return "running", true
	}
}

// Call is one request the stand-in answered.
type Call struct {
	Method, Path, Query string
	Body                map[string]any
}

type fault struct {
	op, code      string
	status, count int
}

// API is the stand-in. Create it with New.
type API struct {
	// URL is the endpoint to give the client (hcloud.WithEndpoint).
	URL string
	srv *httptest.Server
	now func() time.Time

	mu      sync.Mutex
	servers map[int64]*Server
	faults  []fault
	calls   []Call
	seq     int64
	hold    chan struct{}
}

// New starts a stand-in whose lifecycle follows now (time.Now when nil). Close it.
func New(now func() time.Time) *API {
	if now == nil {
		now = time.Now
	}
	a := &API{now: now, servers: map[int64]*Server{}, seq: 4711000}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	a.URL = a.srv.URL
	return a
}

// Close releases held requests and stops the server.
func (a *API) Close() {
	a.Release()
	a.srv.Close()
}

// Fail makes the next count calls of op ("create", "get", "list", "delete") answer the API
// error code with HTTP status.
func (a *API) Fail(op, code string, status, count int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults = append(a.faults, fault{op, code, status, max(1, count)})
}

// ArmedFaults is how many injected failures are still to be answered.
func (a *API) ArmedFaults() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, f := range a.faults {
		n += f.count
	}
	return n
}

// ClearFaults disarms every injected failure (the outage ends).
func (a *API) ClearFaults() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults = nil
}

// Hold makes every request wait until Release (or until its client gives up).
func (a *API) Hold() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold == nil {
		a.hold = make(chan struct{})
	}
}

// Release lets held requests answer.
func (a *API) Release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
	}
}

// Calls returns the requests answered so far.
func (a *API) Calls() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// Servers returns a copy of every server that still exists, by ID.
func (a *API) Servers() []Server {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	var out []Server
	for _, id := range slices.Sorted(maps.Keys(a.servers)) {
		s := *a.servers[id]
		if _, ok := s.Status(now); ok {
			s.Labels = maps.Clone(s.Labels)
			out = append(out, s)
		}
	}
	return out
}

// Now is the stand-in's clock.
func (a *API) Now() time.Time { return a.now() }

// Remove starts deleting a server as the cloud does on its own (a host failure).
func (a *API) Remove(id int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.servers[id]
	if ok && s.Deleting.IsZero() {
		s.Deleting = a.now()
	}
	return ok
}

// Put stores a server as it is, replacing one with its ID.
func (a *API) Put(s Server) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.Labels = maps.Clone(s.Labels)
	a.servers[s.ID] = &s
}

type apiError struct {
	status        int
	code, message string
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e apiError) {
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"code": e.code, "message": e.message, "details": nil}})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(b) > maxBody {
		writeError(w, apiError{http.StatusRequestEntityTooLarge, "invalid_input", "request body too large or unreadable"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+Token {
		writeError(w, apiError{http.StatusUnauthorized, "unauthorized", "unable to authenticate"})
		return
	}
	c := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &c.Body); err != nil {
			writeError(w, apiError{http.StatusBadRequest, "json_error", "invalid JSON"})
			return
		}
	}
	a.mu.Lock()
	a.calls = append(a.calls, c)
	hold := a.hold
	a.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	op, id := route(r.Method, r.URL.Path)
	if op == "" {
		writeError(w, apiError{http.StatusNotFound, "not_found", "no such route " + r.Method + " " + r.URL.Path})
		return
	}
	if f := a.takeFault(op); f != nil {
		writeError(w, apiError{f.status, f.code, "injected " + f.code})
		return
	}
	status, resp, aerr := 0, any(nil), (*apiError)(nil)
	switch op {
	case "create":
		status, resp, aerr = a.create(b)
	case "get":
		status, resp, aerr = a.get(id)
	case "list":
		status, resp, aerr = a.list(r)
	case "delete":
		status, resp, aerr = a.delete(id)
	}
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	writeJSON(w, status, resp)
}

func route(method, path string) (op string, id int64) {
	switch {
	case path == "/servers" && method == http.MethodPost:
		return "create", 0
	case path == "/servers" && method == http.MethodGet:
		return "list", 0
	}
	rest, ok := strings.CutPrefix(path, "/servers/")
	if !ok {
		return "", 0
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return "", 0
	}
	switch method {
	case http.MethodGet:
		return "get", n
	case http.MethodDelete:
		return "delete", n
	}
	return "", 0
}

func (a *API) takeFault(op string) *fault {
	for i := range a.faults {
		f := a.faults[i]
		if f.op != op {
			continue
		}
		if f.count <= 1 {
			a.faults = slices.Delete(a.faults, i, i+1)
		} else {
			a.faults[i].count--
		}
		return &f
	}
	return nil
}

type createBody struct {
	Name             string            `json:"name"`
	ServerType       string            `json:"server_type"`
	Image            string            `json:"image"`
	Location         string            `json:"location"`
	UserData         string            `json:"user_data"`
	Labels           map[string]string `json:"labels"`
	StartAfterCreate *bool             `json:"start_after_create"`
	PublicNet        *struct {
		EnableIPv4 bool `json:"enable_ipv4"`
		EnableIPv6 bool `json:"enable_ipv6"`
	} `json:"public_net"`
	Firewalls []struct {
		Firewall int64 `json:"firewall"`
	} `json:"firewalls"`
}

func (a *API) create(b []byte) (int, any, *apiError) {
	var body createBody
	if err := json.Unmarshal(b, &body); err != nil {
		return 0, nil, &apiError{http.StatusBadRequest, "json_error", err.Error()}
	}
	if body.Name == "" || body.ServerType == "" || body.Image == "" {
		return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", "name, server_type and image are required"}
	}
	if len(body.UserData) > 32<<10 {
		return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", "user_data is too long"}
	}
	now := a.now()
	for _, s := range a.servers {
		if _, ok := s.Status(now); ok && s.Name == body.Name {
			return 0, nil, &apiError{http.StatusConflict, "uniqueness_error", "server name is already used"}
		}
	}
	a.seq++
	s := &Server{
		ID: a.seq, Name: body.Name, ServerType: body.ServerType, Image: body.Image, Location: body.Location,
		UserData: body.UserData, Labels: maps.Clone(body.Labels), Created: now.UTC().Truncate(time.Second),
		IP: fmt.Sprintf("127.3.%d.%d", a.seq/250%250, 1+a.seq%250),
	}
	if s.Location == "" {
		s.Location = "fsn1"
	}
	if body.PublicNet != nil {
		s.IPv6 = body.PublicNet.EnableIPv6
	}
	for _, f := range body.Firewalls {
		s.Firewalls = append(s.Firewalls, f.Firewall)
	}
	a.servers[s.ID] = s
	return http.StatusCreated, map[string]any{
		"server":        a.view(s, now),
		"action":        action(s.ID, "create_server", now),
		"next_actions":  []any{action(s.ID, "start_server", now)},
		"root_password": nil,
	}, nil
}

func (a *API) get(id int64) (int, any, *apiError) {
	now := a.now()
	s, ok := a.servers[id]
	if ok {
		_, ok = s.Status(now)
	}
	if !ok {
		return 0, nil, &apiError{http.StatusNotFound, "not_found", fmt.Sprintf("server with ID '%d' not found", id)}
	}
	return http.StatusOK, map[string]any{"server": a.view(s, now)}, nil
}

func (a *API) delete(id int64) (int, any, *apiError) {
	now := a.now()
	s, ok := a.servers[id]
	if ok {
		_, ok = s.Status(now)
	}
	if !ok {
		return 0, nil, &apiError{http.StatusNotFound, "not_found", fmt.Sprintf("server with ID '%d' not found", id)}
	}
	if s.Deleting.IsZero() {
		s.Deleting = now
	}
	return http.StatusOK, map[string]any{"action": action(id, "delete_server", now)}, nil
}

// matches reports whether labels satisfy a label selector of "k=v", "k!=v", "k" and "!k" terms.
func matches(selector string, labels map[string]string) (bool, error) {
	if selector == "" {
		return true, nil
	}
	for _, term := range strings.Split(selector, ",") {
		term = strings.TrimSpace(term)
		switch {
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			if labels[k] == v {
				return false, nil
			}
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(term, "=")
			if got, ok := labels[k]; !ok || got != v {
				return false, nil
			}
		case strings.HasPrefix(term, "!"):
			if _, ok := labels[term[1:]]; ok {
				return false, nil
			}
		case term != "":
			if _, ok := labels[term]; !ok {
				return false, nil
			}
		default:
			return false, fmt.Errorf("empty term in label selector %q", selector)
		}
	}
	return true, nil
}

func (a *API) list(r *http.Request) (int, any, *apiError) {
	q := r.URL.Query()
	page, perPage := 1, 25
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", "page must be a positive integer"}
		}
		page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 50 {
			return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", "per_page must be 1..50"}
		}
		perPage = n
	}
	now := a.now()
	var match []*Server
	for _, id := range slices.Sorted(maps.Keys(a.servers)) {
		s := a.servers[id]
		if _, ok := s.Status(now); !ok {
			continue
		}
		if name := q.Get("name"); name != "" && s.Name != name {
			continue
		}
		ok, err := matches(q.Get("label_selector"), s.Labels)
		if err != nil {
			return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", err.Error()}
		}
		if ok {
			match = append(match, s)
		}
	}
	last := max(1, (len(match)+perPage-1)/perPage)
	start, end := min(len(match), (page-1)*perPage), min(len(match), page*perPage)
	views := []any{}
	for _, s := range match[start:end] {
		views = append(views, a.view(s, now))
	}
	pag := map[string]any{"page": page, "per_page": perPage, "previous_page": nil, "next_page": nil, "last_page": last, "total_entries": len(match)}
	if page > 1 {
		pag["previous_page"] = page - 1
	}
	if page < last {
		pag["next_page"] = page + 1
	}
	return http.StatusOK, map[string]any{"servers": views, "meta": map[string]any{"pagination": pag}}, nil
}

func action(id int64, command string, now time.Time) map[string]any {
	return map[string]any{
		"id": id*10 + 1, "command": command, "status": "running", "progress": 0,
		"started": now.UTC().Format(time.RFC3339), "finished": nil, "error": nil,
		"resources": []any{map[string]any{"id": id, "type": "server"}},
	}
}

func (a *API) view(s *Server, now time.Time) map[string]any {
	status, _ := s.Status(now)
	ipv6 := any(nil)
	if s.IPv6 {
		ipv6 = map[string]any{"id": s.ID + 100, "ip": "2001:db8::/64", "blocked": false, "dns_ptr": []any{}}
	}
	return map[string]any{
		"id": s.ID, "name": s.Name, "status": status, "created": s.Created.Format(time.RFC3339),
		"public_net": map[string]any{
			"ipv4":         map[string]any{"id": s.ID + 50, "ip": s.IP, "blocked": false, "dns_ptr": "static.example"},
			"ipv6":         ipv6,
			"floating_ips": []any{},
			"firewalls":    []any{},
		},
		"private_net":       []any{},
		"server_type":       map[string]any{"id": 104, "name": s.ServerType, "cores": 2, "memory": 4.0, "disk": 40, "cpu_type": "shared", "architecture": "x86"},
		"location":          map[string]any{"id": 1, "name": s.Location, "network_zone": "eu-central"},
		"image":             map[string]any{"id": 161547269, "type": "system", "status": "available", "name": s.Image},
		"labels":            s.Labels,
		"volumes":           []any{},
		"load_balancers":    []any{},
		"included_traffic":  21990232555520,
		"rescue_enabled":    false,
		"locked":            false,
		"protection":        map[string]any{"delete": false, "rebuild": false},
		"primary_disk_size": 40,
	}
}
