package discovery

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// listQuery is a parsed GET /v1/proxies query.
type listQuery struct {
	sel     map[string]string
	healthy *bool
	limit   int    // proxies per page, 1..maxListLimit
	after   string // the id the page starts after ("": the first page)
}

// parseListQuery accepts only attr.<key>=<value> (once per key), healthy=true|false,
// limit=1..maxListLimit and continue (the previous page's value).
func parseListQuery(r *http.Request) (listQuery, error) {
	// url.Values from r.URL.Query() drops a pair it cannot decode, which silently widened a
	// filter to the whole fleet: a query that does not parse is a 400.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return listQuery{}, httpx.Errorf(http.StatusBadRequest, "malformed query: %s", err.Error())
	}
	lq := listQuery{sel: map[string]string{}, limit: defaultListLimit}
	for k, vs := range q {
		switch {
		case k == "healthy":
			if len(vs) != 1 || (vs[0] != "true" && vs[0] != "false") {
				return listQuery{}, httpx.Errorf(http.StatusBadRequest, "query parameter healthy: want exactly one of true or false")
			}
			b := vs[0] == "true"
			lq.healthy = &b
		case k == "limit":
			n, err := strconv.Atoi(vs[0])
			if len(vs) != 1 || err != nil || n < 1 || n > maxListLimit {
				return listQuery{}, httpx.Errorf(http.StatusBadRequest, "query parameter limit: want one whole number from 1 to %d", maxListLimit)
			}
			lq.limit = n
		case k == "continue":
			after, ok := decodeContinue(vs[0])
			if len(vs) != 1 || !ok {
				return listQuery{}, httpx.Errorf(http.StatusBadRequest, "query parameter continue: want the previous page's continue value, unchanged")
			}
			lq.after = after
		case strings.HasPrefix(k, "attr."):
			key := strings.TrimPrefix(k, "attr.")
			if len(vs) != 1 {
				return listQuery{}, httpx.Errorf(http.StatusBadRequest, "query parameter %s: given %d times; selectors are equality on one value", k, len(vs))
			}
			if err := checkSelectorPair(key, vs[0]); err != nil {
				return listQuery{}, httpx.Wrap(http.StatusBadRequest, err, "query parameter %s", k)
			}
			lq.sel[key] = vs[0]
		default:
			return listQuery{}, httpx.Errorf(http.StatusBadRequest, "unknown query parameter %q: want attr.<key>=<value>, healthy=true|false, limit or continue", k)
		}
	}
	if len(lq.sel) > maxSelectorPairs {
		return listQuery{}, httpx.Errorf(http.StatusBadRequest, "selector has %d pairs, at most %d", len(lq.sel), maxSelectorPairs)
	}
	return lq, nil
}

// encodeContinue makes the last id of a page the next page's opaque start; decodeContinue
// reads it back.
func encodeContinue(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func decodeContinue(s string) (string, bool) {
	if s == "" || len(s) > maxContinueLen {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return string(b), err == nil && utf8.Valid(b)
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
