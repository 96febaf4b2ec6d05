package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrUsername is wrapped by every error of ParseUsername; the message says which part is wrong.
var ErrUsername = errors.New("proxy username")

// Bounds of a username (the same as the discovery API's selector bounds).
const (
	maxUsernameLen   = 1024
	maxSelectorPairs = 32
	maxAttrKeyLen    = 63
	maxAttrValueLen  = 256
	maxSessionLen    = 128
)

// Selection is what a proxy username asks for.
type Selection struct {
	// Selector must be contained in the upstream's attributes.
	Selector map[string]string
	// Session, when set, sticks the caller's requests to one upstream.
	Session string
	// Namespace, when set, limits the upstreams to that namespace.
	Namespace string
}

// ParseUsername reads the username grammar (docs/api.md, "Gateway"):
//
//	username = "" | "any" | pair *("-" pair)
//	pair     = key "-" value
//
// Keys are "session" (sticky session id), "ns" (namespace) or an attribute key; every other
// pair is a selector on the upstream's attributes. u is the username exactly as the Basic
// credential carries it; it is split on "-" and each part percent-decoded once, so a "-" inside a
// key or value is %2D in the credential (any byte may be percent-encoded). Clients decode a proxy
// URL's userinfo once before they send it (curl, requests, Scrapy), so in a URL that is %252D.
// So pool-web-geo-eu-session-a1b2-ns-team selects pool=web, geo=eu in namespace team with
// session a1b2.
func ParseUsername(u string) (Selection, error) {
	sel := Selection{Selector: map[string]string{}}
	if u == "" || u == "any" {
		return sel, nil
	}
	if len(u) > maxUsernameLen {
		return Selection{}, fmt.Errorf("%w: longer than %d bytes", ErrUsername, maxUsernameLen)
	}
	parts := strings.Split(u, "-")
	if len(parts)%2 != 0 {
		return Selection{}, fmt.Errorf("%w %q: %d parts separated by '-', want key-value pairs (a '-' inside a value is %%2D in the credential: write %%252D in a proxy URL, which clients decode once)", ErrUsername, u, len(parts))
	}
	if len(parts)/2 > maxSelectorPairs+2 {
		return Selection{}, fmt.Errorf("%w: %d pairs, at most %d", ErrUsername, len(parts)/2, maxSelectorPairs+2)
	}
	seen := map[string]bool{}
	for i := 0; i < len(parts); i += 2 {
		k, err := url.PathUnescape(parts[i])
		if err != nil {
			return Selection{}, fmt.Errorf("%w: key %q: bad percent-encoding", ErrUsername, parts[i])
		}
		v, err := url.PathUnescape(parts[i+1])
		if err != nil {
			return Selection{}, fmt.Errorf("%w: value %q of %s: bad percent-encoding", ErrUsername, parts[i+1], k)
		}
		if k == "" {
			return Selection{}, fmt.Errorf("%w %q: empty key at part %d (two '-' in a row?)", ErrUsername, u, i+1)
		}
		if v == "" {
			return Selection{}, fmt.Errorf("%w: key %s has an empty value", ErrUsername, k)
		}
		if seen[k] {
			return Selection{}, fmt.Errorf("%w: key %s given twice", ErrUsername, k)
		}
		seen[k] = true
		switch k {
		case "session":
			if len(v) > maxSessionLen || !isToken(v) {
				return Selection{}, fmt.Errorf("%w: session %q: want 1 to %d letters, digits, '.', '_'", ErrUsername, v, maxSessionLen)
			}
			sel.Session = v
		case "ns":
			if len(v) > maxAttrKeyLen || !isDNSLabel(v) {
				return Selection{}, fmt.Errorf("%w: ns %q is not a namespace name", ErrUsername, v)
			}
			sel.Namespace = v
		default:
			if err := checkAttr(k, v); err != nil {
				return Selection{}, fmt.Errorf("%w: %w", ErrUsername, err)
			}
			sel.Selector[k] = v
		}
	}
	return sel, nil
}

func checkAttr(k, v string) error {
	if len(k) > maxAttrKeyLen {
		return fmt.Errorf("attribute key %.20q... longer than %d characters", k, maxAttrKeyLen)
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '/') {
			return fmt.Errorf("attribute key %q: unknown key (keys are session, ns, or an attribute key of letters, digits, '.', '-', '_', '/')", k)
		}
	}
	if len(v) > maxAttrValueLen {
		return fmt.Errorf("value of %s longer than %d characters", k, maxAttrValueLen)
	}
	for _, c := range v {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("value of %s has a control character", k)
		}
	}
	return nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func isDNSLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
