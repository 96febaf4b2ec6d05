// Package access owns who may call the discovery API: bearer tokens read from a mounted file,
// each scoped to namespaces and to read-only, lease or admin rights, and the caller identity a
// request carries once authenticated. It knows nothing of routes, leases or the fleet.
package access

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Errors of Authenticate; the message never contains the token.
var (
	ErrNoToken      = errors.New("missing bearer token")
	ErrInvalidToken = errors.New("invalid bearer token")
)

// Right is what a token may do in its namespaces.
type Right string

const (
	// RightRead may list proxies.
	RightRead Right = "read"
	// RightLease may list proxies and lease, renew, report on and release them.
	RightLease Right = "lease"
	// RightAdmin has the lease right and may also act on the fleet from the web console
	// (drain a Proxy, release anyone's lease, clear a cooldown) in its namespaces (decision 0298).
	RightAdmin Right = "admin"
)

// AllNamespaces in a token's namespaces grants every namespace.
const AllNamespaces = "*"

// Caller is an authenticated caller.
type Caller struct {
	// Name identifies the token in logs and metrics (never the token itself).
	Name       string
	Namespaces []string // AllNamespaces for every one
	Right      Right
	// Budgets cap the token's traffic through vendor sources (decision 0295).
	Budgets []Budget
}

// Budget periods: a UTC calendar day or month.
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
)

// AnyVendor is a budget's source for the sum of every vendor source.
const AnyVendor = "*"

// Budget caps the bytes, in and out, a token's gateway traffic sends through a vendor
// source in one period; past it the gateway refuses that traffic (our own proxies still
// serve).
type Budget struct {
	// Source is a vendor Proxy's namespace/name, or AnyVendor for all of them together.
	Source string `json:"source"`
	// Period is day or month (UTC calendar periods).
	Period string `json:"period"`
	// Bytes is the cap, at least 1.
	Bytes int64 `json:"bytes"`
}

// MayRead reports whether the caller may see proxies of namespace ns.
func (c *Caller) MayRead(ns string) bool {
	return c != nil && (slices.Contains(c.Namespaces, AllNamespaces) || slices.Contains(c.Namespaces, ns))
}

// MayLease reports whether the caller may lease proxies of namespace ns.
func (c *Caller) MayLease(ns string) bool { return c.MayLeaseSomewhere() && c.MayRead(ns) }

// MayLeaseSomewhere reports whether the caller holds the lease right at all.
func (c *Caller) MayLeaseSomewhere() bool {
	return c != nil && (c.Right == RightLease || c.Right == RightAdmin)
}

// MayAdmin reports whether the caller may act on the fleet of namespace ns from the console.
func (c *Caller) MayAdmin(ns string) bool { return c.MayAdminSomewhere() && c.MayRead(ns) }

// MayAdminSomewhere reports whether the caller holds the admin right at all.
func (c *Caller) MayAdminSomewhere() bool { return c != nil && c.Right == RightAdmin }

// LeaseNamespaces is the caller's lease scope for lease.Request.Namespaces: nil for every
// namespace.
func (c *Caller) LeaseNamespaces() []string {
	if slices.Contains(c.Namespaces, AllNamespaces) {
		return nil
	}
	return slices.Clone(c.Namespaces)
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// FromContext returns the caller ctx carries (nil: none, which may do nothing).
func FromContext(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// Insecure is the caller of every request when auth is explicitly off (-discovery-insecure):
// every right, the console's admin right included (anyone who reaches such a listener can
// already lease every proxy).
var Insecure = &Caller{Name: "insecure", Namespaces: []string{AllNamespaces}, Right: RightAdmin}

// Tokens is a set of scoped tokens.
type Tokens struct {
	entries []tokenEntry
	allow   []allowEntry
	ports   []Port
}

// allowEntry is one prefix of a token's allowlist.
type allowEntry struct {
	prefix netip.Prefix
	caller *Caller
}

type tokenEntry struct {
	hash   [sha256.Size]byte
	caller *Caller
}

// TokenSpec is one token in the YAML form of a tokens file.
type TokenSpec struct {
	Name       string   `json:"name"`
	Token      string   `json:"token"`
	Namespaces []string `json:"namespaces"`
	Right      Right    `json:"right"`
	// Allowlist holds source CIDRs whose connections to the gateway need no proxy password:
	// they act as this token (decision 0278). Only for lease tokens; an address may be in
	// one token's allowlist at most. The discovery API ignores it.
	Allowlist []string `json:"allowlist,omitempty"`
	// Ports are gateway listeners of this token's own: a connection to one needs no proxy
	// password, and without a username it selects with the port's (decision 0279). Only for
	// lease tokens; an address is one token's. The discovery API ignores them.
	Ports []PortSpec `json:"ports,omitempty"`
	// Budgets cap the token's gateway traffic through vendor sources per day or month
	// (decision 0295). Only for lease tokens; one per source and period.
	Budgets []Budget `json:"budgets,omitempty"`
}

// PortSpec is a gateway listener of a token's own.
type PortSpec struct {
	// Addr is the listen address (":8101").
	Addr string `json:"addr"`
	// Protocol is http (a forward proxy, as -gateway-addr) or socks5 (as -gateway-socks-addr).
	Protocol string `json:"protocol"`
	// Username is the selection of a connection that gives none, in the gateway's grammar
	// (checked by the gateway at start).
	Username string `json:"username,omitempty"`
}

// Port is a gateway listener of a token's own, with the token's caller.
type Port struct {
	PortSpec
	Caller *Caller
}

type tokensFile struct {
	Tokens []TokenSpec `json:"tokens"`
}

// maxTokensFile bounds a tokens file: it is read once at start, but it is still input.
const maxTokensFile = 1 << 20

// Load reads a tokens file. Two forms: a small YAML document
//
//	tokens:
//	  - {name: team-a, token: ..., namespaces: [team-a], right: lease}
//	  - {name: dashboards, token: ..., namespaces: ["*"], right: read}
//	  - {name: on-call, token: ..., namespaces: ["*"], right: admin}
//
// or one token per line ('#' comments and blank lines skipped), each with lease rights in
// every namespace (the single-token Secret of earlier versions is this form).
func Load(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("discovery tokens: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("discovery tokens %s: %w", path, err)
	}
	return t, nil
}

// Parse reads the content of a tokens file (see Load).
func Parse(b []byte) (*Tokens, error) {
	if len(b) > maxTokensFile {
		return nil, fmt.Errorf("larger than %d bytes", maxTokensFile)
	}
	var specs []TokenSpec
	if isYAML(b) {
		var f tokensFile
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			return nil, fmt.Errorf("YAML: %w", err)
		}
		specs = f.Tokens
	} else {
		n := 0
		for line := range strings.SplitSeq(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			n++
			specs = append(specs, TokenSpec{Name: fmt.Sprintf("line-token-%d", n), Token: line,
				Namespaces: []string{AllNamespaces}, Right: RightLease})
		}
	}
	return New(specs)
}

// isYAML says the file is the YAML form: its first meaningful line opens the tokens list.
func isYAML(b []byte) bool {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		return bytes.HasPrefix(l, []byte("tokens:"))
	}
	return false
}

// MinTokenLen is the shortest token accepted: a short token is guessed or brute-forced.
const MinTokenLen = 16

// MinTokenChars is how many different characters a token must hold: `aaaaaaaaaaaaaaaa` or
// `abababababababab` is long but guessed first. Six, not more: a random 16-character hex token
// holds fewer than six different characters about once in 10^5 (decision 0258).
const MinTokenChars = 6

// CheckToken says whether tok (trimmed) is strong enough to guard the API, the gateway or the
// hooks: at least MinTokenLen characters, at least MinTokenChars different ones, no white space
// inside. The error never holds the token: the caller names its source.
func CheckToken(tok string) error {
	tok = strings.TrimSpace(tok)
	distinct := map[rune]bool{}
	for _, c := range tok {
		distinct[c] = true
	}
	switch {
	case tok == "":
		return errors.New("blank token")
	case strings.ContainsAny(tok, " \t\r\n"):
		return errors.New("a token may not contain whitespace")
	case len(tok) < MinTokenLen:
		return fmt.Errorf("a token must be at least %d characters, this one has %d (e.g. `openssl rand -hex 32`)", MinTokenLen, len(tok))
	case len(distinct) < MinTokenChars:
		return fmt.Errorf("a token must hold at least %d different characters, this one has %d (e.g. `openssl rand -hex 32`)", MinTokenChars, len(distinct))
	}
	return nil
}

// New checks specs and builds the set. A token CheckToken refuses, a duplicate token
// or name, an empty namespace list or an unknown right is an error naming the entry (by
// name or position, never by token).
func New(specs []TokenSpec) (*Tokens, error) {
	if len(specs) == 0 {
		return nil, errors.New("no token: give at least one, or run with -discovery-insecure")
	}
	t := &Tokens{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, s := range specs {
		id := fmt.Sprintf("token %d", i+1)
		if s.Name != "" {
			id = fmt.Sprintf("token %d (%s)", i+1, s.Name)
		}
		tok := strings.TrimSpace(s.Token)
		if err := CheckToken(tok); err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("%s: name is required (it stands for the token in logs)", id)
		case names[s.Name]:
			return nil, fmt.Errorf("%s: duplicate name", id)
		case len(s.Namespaces) == 0:
			return nil, fmt.Errorf("%s: namespaces is required (use [\"*\"] for every namespace)", id)
		case s.Right != RightRead && s.Right != RightLease && s.Right != RightAdmin:
			return nil, fmt.Errorf("%s: right %q: want read, lease or admin", id, s.Right)
		}
		for _, ns := range s.Namespaces {
			if ns == "" {
				return nil, fmt.Errorf("%s: empty namespace", id)
			}
		}
		h := sha256.Sum256([]byte(tok))
		if hashes[h] {
			return nil, fmt.Errorf("%s: the same token as an earlier entry", id)
		}
		names[s.Name], hashes[h] = true, true
		c := &Caller{Name: s.Name, Namespaces: slices.Clone(s.Namespaces), Right: s.Right}
		t.entries = append(t.entries, tokenEntry{hash: h, caller: c})
		if err := t.addAllowlist(id, c, s.Allowlist); err != nil {
			return nil, err
		}
		if err := t.addPorts(id, c, s.Ports); err != nil {
			return nil, err
		}
		if err := checkBudgets(id, c, s.Budgets); err != nil {
			return nil, err
		}
		c.Budgets = slices.Clone(s.Budgets)
	}
	return t, nil
}

// addAllowlist adds c's source CIDRs: each a prefix that is not every address, of a lease
// token, overlapping no other token's (an address names one token).
func (t *Tokens) addAllowlist(id string, c *Caller, cidrs []string) error {
	if len(cidrs) > 0 && !c.MayLeaseSomewhere() {
		return fmt.Errorf("%s: allowlist: only a token with the lease right may have one", id)
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return fmt.Errorf("%s: allowlist %q: want a CIDR (10.0.0.0/24) or an address", id, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96) // ::ffff:10.0.0.0/104 is 10.0.0.0/8
		}
		p = p.Masked()
		if p.Bits() == 0 {
			return fmt.Errorf("%s: allowlist %q is every address: no password at all is -discovery-insecure, on a trusted address only", id, s)
		}
		for _, o := range t.allow {
			if o.prefix.Overlaps(p) && o.caller != c {
				return fmt.Errorf("%s: allowlist %s overlaps token %s's %s: an address must name one token", id, p, o.caller.Name, o.prefix)
			}
		}
		t.allow = append(t.allow, allowEntry{prefix: p, caller: c})
	}
	return nil
}

// addPorts adds c's own gateway listeners: of a lease token, each with an address no other
// port has and a known protocol.
func (t *Tokens) addPorts(id string, c *Caller, ports []PortSpec) error {
	if len(ports) > 0 && !c.MayLeaseSomewhere() {
		return fmt.Errorf("%s: ports: only a token with the lease right may have them", id)
	}
	for _, p := range ports {
		switch {
		case p.Addr == "":
			return fmt.Errorf("%s: a port without addr", id)
		case p.Protocol != "http" && p.Protocol != "socks5":
			return fmt.Errorf("%s: port %s: protocol %q: want http or socks5", id, p.Addr, p.Protocol)
		}
		for _, o := range t.ports {
			if o.Addr == p.Addr {
				return fmt.Errorf("%s: port %s is token %s's too", id, p.Addr, o.Caller.Name)
			}
		}
		t.ports = append(t.ports, Port{PortSpec: p, Caller: c})
	}
	return nil
}

// Ports are the tokens' own gateway listeners, in the file's order.
func (t *Tokens) Ports() []Port {
	if t == nil {
		return nil
	}
	return slices.Clone(t.ports)
}

// BySource is the token whose allowlist holds addr (nil: none).
func (t *Tokens) BySource(addr netip.Addr) *Caller {
	if t == nil {
		return nil
	}
	addr = addr.Unmap()
	for _, e := range t.allow {
		if e.prefix.Contains(addr) {
			return e.caller
		}
	}
	return nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// ByName is the caller of the token named name (nil: none, or t is nil).
func (t *Tokens) ByName(name string) *Caller {
	if t == nil {
		return nil
	}
	for _, e := range t.entries {
		if e.caller.Name == name {
			return e.caller
		}
	}
	return nil
}

// LeaseHolders is how many tokens may lease in namespace ns (their scope names it or every
// namespace): the holders among whom its capacity is shared.
func (t *Tokens) LeaseHolders(ns string) int {
	n := 0
	for _, e := range t.entries {
		if e.caller.MayLease(ns) {
			n++
		}
	}
	return n
}

// Authenticate finds the caller of r's bearer token. Every token is compared, by hash and in
// constant time, whichever matches, so timing says nothing about which token is close.
func (t *Tokens) Authenticate(r *http.Request) (*Caller, error) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return nil, ErrNoToken
	}
	return t.Token(tok)
}

// Token finds the caller of a bare token (the gateway's proxy password), compared as
// Authenticate compares: by hash, in constant time, against every entry.
func (t *Tokens) Token(tok string) (*Caller, error) {
	if strings.TrimSpace(tok) == "" {
		return nil, ErrNoToken
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found *Caller
	for i := range t.entries {
		if subtle.ConstantTimeCompare(got[:], t.entries[i].hash[:]) == 1 {
			found = t.entries[i].caller
		}
	}
	if found == nil {
		return nil, ErrInvalidToken
	}
	return found, nil
}

// checkBudgets says what is wrong with a token's budgets: each of a lease token, naming a
// source (namespace/name or AnyVendor) and a period, with a positive cap, one per source
// and period.
func checkBudgets(id string, c *Caller, budgets []Budget) error {
	if len(budgets) > 0 && c.Right != RightLease {
		return fmt.Errorf("%s: budgets: only a token with the lease right may have them", id)
	}
	seen := map[[2]string]bool{}
	for _, b := range budgets {
		ns, name, ok := strings.Cut(b.Source, "/")
		switch {
		case b.Source != AnyVendor && (!ok || ns == "" || name == ""):
			return fmt.Errorf("%s: budget source %q: want a vendor Proxy's namespace/name or %q", id, b.Source, AnyVendor)
		case b.Period != PeriodDay && b.Period != PeriodMonth:
			return fmt.Errorf("%s: budget for %s: period %q: want day or month", id, b.Source, b.Period)
		case b.Bytes < 1:
			return fmt.Errorf("%s: budget for %s per %s: bytes must be at least 1", id, b.Source, b.Period)
		case seen[[2]string{b.Source, b.Period}]:
			return fmt.Errorf("%s: two budgets for %s per %s", id, b.Source, b.Period)
		}
		seen[[2]string{b.Source, b.Period}] = true
	}
	return nil
}
