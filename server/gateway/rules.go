package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/lease"
)

// ErrRules is wrapped by every error of LoadRules and ParseRules.
var ErrRules = errors.New("gateway rules")

// Bounds of a rules file: it is read once at start, but it is still input.
const (
	maxRulesFile        = 1 << 20
	maxRules            = 1000
	DefaultRuleBodySize = 64 << 10
	maxRuleBodySize     = 1 << 20
)

// Rule says which answers of a target mean that the upstream is rate limited or banned there.
// Every condition given must hold; a rule with none is refused.
type Rule struct {
	// Name appears in metrics (bans detected by rule) and logs.
	Name string `json:"name"`
	// Hosts are path.Match globs on the target host ("*.example.com"); empty: every host.
	Hosts []string `json:"hosts,omitempty"`
	// Status are the answer's status codes; empty: any.
	Status []int `json:"status,omitempty"`
	// Header is a header name whose value must match HeaderPattern (present, when empty).
	Header        string `json:"header,omitempty"`
	HeaderPattern string `json:"headerPattern,omitempty"`
	// BodyPattern is a regular expression searched in the answer's first BodyBytes.
	BodyPattern string `json:"bodyPattern,omitempty"`
	// Result is rate_limited or banned.
	Result lease.Result `json:"result"`

	header, body *regexp.Regexp
}

// Rules is the ordered rule list: the first rule that matches an answer decides.
type Rules struct {
	Rules []Rule `json:"rules"`
	// BodyBytes is how much of an answer a body pattern may read (default 64 KiB, at most 1 MiB).
	BodyBytes int `json:"bodyBytes,omitempty"`
	// NoDefaults drops the default rules appended after the file's (429 rate_limited,
	// 403 banned).
	NoDefaults bool `json:"noDefaults,omitempty"`
	// Paces fix the pace of some sites (decision 0260): the first whose hosts match applies.
	Paces []PaceRule `json:"paces,omitempty"`
	// VendorHosts are path.Match globs of sites the waterfall sends to a vendor source from
	// their first request, without trying our own fleet (with -gateway-waterfall; 0294).
	VendorHosts []string `json:"vendorHosts,omitempty"`
}

// vendorSite reports whether a rule marks target as the vendor's from the start.
func (rs *Rules) vendorSite(target string) bool {
	return len(rs.VendorHosts) > 0 && (&Rule{Hosts: rs.VendorHosts}).hostMatches(target)
}

// PaceRule bounds the pace of the sites it matches: requests per second through each upstream
// IP. The gateway starts there and never goes faster; a 429 still slows it down.
type PaceRule struct {
	// Hosts are path.Match globs on the target host, as in Rule; empty: every host.
	Hosts             []string `json:"hosts,omitempty"`
	RequestsPerSecond float64  `json:"requestsPerSecond"`
}

// pace is the rate a pace rule fixes for target, if one matches.
func (rs *Rules) pace(target string) (float64, bool) {
	for _, p := range rs.Paces {
		if (&Rule{Hosts: p.Hosts}).hostMatches(target) {
			return p.RequestsPerSecond, true
		}
	}
	return 0, false
}

// DefaultRules are what applies without a file, and after a file's rules.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "default-429", Status: []int{http.StatusTooManyRequests}, Result: lease.ResultRateLimited},
		{Name: "default-403", Status: []int{http.StatusForbidden}, Result: lease.ResultBanned},
	}
}

// LoadRules reads a rules file (YAML or JSON). An empty path is the default rules.
func LoadRules(file string) (*Rules, error) {
	if file == "" {
		return ParseRules(nil)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRules, err)
	}
	r, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// ParseRules checks and compiles a rules document; nil or empty is the default rules.
func ParseRules(b []byte) (*Rules, error) {
	if len(b) > maxRulesFile {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrRules, maxRulesFile)
	}
	rs := &Rules{}
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := yaml.UnmarshalStrict(b, rs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRules, err)
		}
	}
	if len(rs.Rules)+len(rs.Paces)+len(rs.VendorHosts) > maxRules {
		return nil, fmt.Errorf("%w: %d rules, at most %d", ErrRules, len(rs.Rules), maxRules)
	}
	switch {
	case rs.BodyBytes == 0:
		rs.BodyBytes = DefaultRuleBodySize
	case rs.BodyBytes < 0 || rs.BodyBytes > maxRuleBodySize:
		return nil, fmt.Errorf("%w: bodyBytes %d out of range 1..%d", ErrRules, rs.BodyBytes, maxRuleBodySize)
	}
	if !rs.NoDefaults {
		rs.Rules = append(rs.Rules, DefaultRules()...)
	}
	for i, p := range rs.Paces {
		if !(p.RequestsPerSecond > 0 && p.RequestsPerSecond <= MaxPaceRate) {
			return nil, fmt.Errorf("%w: pace %d: requestsPerSecond %g: want more than 0, at most %g", ErrRules, i+1, p.RequestsPerSecond, MaxPaceRate)
		}
		for _, h := range p.Hosts {
			if _, err := path.Match(h, "x"); err != nil || h == "" {
				return nil, fmt.Errorf("%w: pace %d: host glob %q is malformed", ErrRules, i+1, h)
			}
		}
	}
	for _, h := range rs.VendorHosts {
		if _, err := path.Match(h, "x"); err != nil || h == "" {
			return nil, fmt.Errorf("%w: vendorHosts: host glob %q is malformed", ErrRules, h)
		}
	}
	for i := range rs.Rules {
		if err := rs.Rules[i].compile(); err != nil {
			return nil, fmt.Errorf("%w: rule %d (%s): %w", ErrRules, i+1, rs.Rules[i].Name, err)
		}
	}
	return rs, nil
}

func (r *Rule) compile() error {
	switch {
	case r.Name == "":
		return errors.New("name is required (it labels the metric of bans detected)")
	case r.Result != lease.ResultRateLimited && r.Result != lease.ResultBanned:
		return fmt.Errorf("result %q: want rate_limited or banned", r.Result)
	case len(r.Status) == 0 && r.Header == "" && r.BodyPattern == "":
		return errors.New("no condition: give status, header or bodyPattern")
	case r.HeaderPattern != "" && r.Header == "":
		return errors.New("headerPattern without header")
	}
	for _, h := range r.Hosts {
		if _, err := path.Match(h, "x"); err != nil || h == "" {
			return fmt.Errorf("host glob %q is malformed", h)
		}
	}
	for _, s := range r.Status {
		if s < 100 || s > 599 {
			return fmt.Errorf("status %d is not an HTTP status", s)
		}
	}
	var err error
	if r.HeaderPattern != "" {
		if r.header, err = regexp.Compile(r.HeaderPattern); err != nil {
			return fmt.Errorf("headerPattern: %w", err)
		}
	}
	if r.BodyPattern != "" {
		if r.body, err = regexp.Compile(r.BodyPattern); err != nil {
			return fmt.Errorf("bodyPattern: %w", err)
		}
	}
	return nil
}

// generic reports whether r bans on the status alone (the default 403 rule): such an answer
// may be the site refusing the request for everyone, so a second upstream is asked first.
func (r *Rule) generic() bool {
	return r.Result == lease.ResultBanned && r.Header == "" && r.body == nil
}

// needsBody reports whether any rule that could match (host, status) reads the body.
func (rs *Rules) needsBody(host string, status int) bool {
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if r.body != nil && r.hostMatches(host) && r.statusMatches(status) {
			return true
		}
	}
	return false
}

// Match returns the first rule that the answer (status, header, the body's first bytes)
// meets for host, or nil.
func (rs *Rules) Match(host string, status int, h http.Header, body []byte) *Rule {
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if !r.hostMatches(host) || !r.statusMatches(status) {
			continue
		}
		if r.Header != "" {
			vs := h.Values(r.Header)
			if len(vs) == 0 {
				continue
			}
			if r.header != nil && !anyMatch(r.header, vs) {
				continue
			}
		}
		if r.body != nil && !r.body.Match(body) {
			continue
		}
		return r
	}
	return nil
}

func anyMatch(re *regexp.Regexp, vs []string) bool {
	for _, v := range vs {
		if re.MatchString(v) {
			return true
		}
	}
	return false
}

func (r *Rule) hostMatches(host string) bool {
	if len(r.Hosts) == 0 {
		return true
	}
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		host = h
	}
	for _, g := range r.Hosts {
		if ok, _ := path.Match(g, host); ok {
			return true
		}
	}
	return false
}

func (r *Rule) statusMatches(s int) bool {
	if len(r.Status) == 0 {
		return true
	}
	for _, x := range r.Status {
		if x == s {
			return true
		}
	}
	return false
}

// upstreamErrorHeaders mark an answer an upstream proxy made itself (Squid's error pages, the
// mock proxy's refusals): it says nothing of the site, so no rule applies to it and it is
// never reported as a ban (issue 30 part 6).
var upstreamErrorHeaders = []string{"X-Squid-Error", "X-Mock-Proxy-Error"}

// upstreamError reports whether the answer is the upstream proxy's own.
func upstreamError(h http.Header) bool {
	for _, k := range upstreamErrorHeaders {
		if h.Get(k) != "" {
			return true
		}
	}
	return false
}

// markerValue is what the client sees of an upstream's error marker: Squid's error code and
// errno ("ERR_CONNECT_FAIL 111"), the mock's "relay"; anything else (an address, a host name)
// becomes "upstream".
func markerValue(v string) string {
	code, errno, _ := strings.Cut(strings.TrimSpace(v), " ")
	if code == "" || len(code) > 64 || strings.TrimLeft(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_") != "" {
		return "upstream"
	}
	if errno != "" && (len(errno) > 8 || strings.Trim(errno, "0123456789") != "") {
		return code
	}
	return strings.TrimSpace(v)
}

// hung reports whether a try failed because the site sent no answer head in time (not because
// the upstream could not be dialled): every other upstream would wait as long.
func hung(err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), bounded by limit; zero
// when absent or unreadable.
func retryAfter(h http.Header, now time.Time, limit time.Duration) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(limit/time.Second) {
			return limit
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now).Round(time.Second)
	}
	return min(max(d, 0), limit)
}
