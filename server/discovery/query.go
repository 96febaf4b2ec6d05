package discovery

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// parseListQuery accepts only attr.<key>=<value> (once per key) and healthy=true|false.
func parseListQuery(r *http.Request) (map[string]string, *bool, error) {
	// url.Values from r.URL.Query() drops a pair it cannot decode, which silently widened a
	// filter to the whole fleet: a query that does not parse is a 400.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, nil, httpx.Errorf(http.StatusBadRequest, "malformed query: %s", err.Error())
	}
	sel := map[string]string{}
	var healthy *bool
	for k, vs := range q {
		switch {
		case k == "healthy":
			if len(vs) != 1 || (vs[0] != "true" && vs[0] != "false") {
				return nil, nil, httpx.Errorf(http.StatusBadRequest, "query parameter healthy: want exactly one of true or false")
			}
			b := vs[0] == "true"
			healthy = &b
		case strings.HasPrefix(k, "attr."):
			key := strings.TrimPrefix(k, "attr.")
			if len(vs) != 1 {
				return nil, nil, httpx.Errorf(http.StatusBadRequest, "query parameter %s: given %d times; selectors are equality on one value", k, len(vs))
			}
			if err := checkSelectorPair(key, vs[0]); err != nil {
				return nil, nil, httpx.Wrap(http.StatusBadRequest, err, "query parameter %s", k)
			}
			sel[key] = vs[0]
		default:
			return nil, nil, httpx.Errorf(http.StatusBadRequest, "unknown query parameter %q: want attr.<key>=<value> or healthy=true|false", k)
		}
	}
	if len(sel) > maxSelectorPairs {
		return nil, nil, httpx.Errorf(http.StatusBadRequest, "selector has %d pairs, at most %d", len(sel), maxSelectorPairs)
	}
	return sel, healthy, nil
}

// checkSelectorPair rejects keys outside attribute-key syntax: anything else (!=, in (...),
// globs) would be a selector language this API does not speak.
func checkSelectorPair(key, value string) error {
	if key == "" || len(key) > maxAttrKeyLen {
		return fmt.Errorf("attribute key must be 1 to %d characters", maxAttrKeyLen)
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '/') {
			return fmt.Errorf("unsupported selector syntax in key %q: keys are letters, digits, '.', '-', '_', '/' and selectors are equality only", key)
		}
	}
	if len(value) > maxAttrValueLen {
		return fmt.Errorf("attribute value longer than %d characters", maxAttrValueLen)
	}
	return nil
}

// normalizeTarget lower-cases a host name (optionally host:port) and rejects anything else.
func normalizeTarget(t string, required bool) (string, error) {
	if t == "" {
		if required {
			return "", httpx.Errorf(http.StatusBadRequest, "report: target is required (the host the result was seen on)")
		}
		return "", nil
	}
	if len(t) > maxTargetLen {
		return "", httpx.Errorf(http.StatusBadRequest, "target longer than %d characters", maxTargetLen)
	}
	t = strings.ToLower(t)
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']') {
			return "", httpx.Errorf(http.StatusBadRequest, "target %q: want a host name or host:port, not a URL", t)
		}
	}
	return t, nil
}
