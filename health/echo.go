package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ErrEcho is wrapped by every error reading an echo answer.
var ErrEcho = errors.New("health: echo answer")

// maxEchoBytes bounds an echo answer: an address, or a small JSON object around one.
const maxEchoBytes = 4 << 10

// EchoHandler answers the caller's address, the one the TCP connection came from, as text
// (default) or as {"ip": "..."} when the request accepts application/json. It never reads
// X-Forwarded-For or the like: a proxy that adds the crawler's own address there is exactly
// what an exit check must not take at its word.
func EchoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		addr, err := netip.ParseAddr(host)
		if err != nil {
			http.Error(w, "caller address unknown", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(struct {
				IP string `json:"ip"`
			}{addr.Unmap().String()})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, addr.Unmap().String())
	})
}

// echoKeys are the fields that well-known echo services put the address in: ours and ipify
// ("ip"), httpbin ("origin"), ip-api ("query").
var echoKeys = []string{"ip", "origin", "query", "address"}

// ParseEcho reads an echo answer: an address alone on a line, or a JSON object with the
// address under one of echoKeys. httpbin's origin may list several addresses ("a, b") when
// proxies on the way add theirs; the first is the one the target saw connect.
func ParseEcho(body []byte) (netip.Addr, error) {
	text := strings.TrimSpace(string(body))
	if text == "" {
		return netip.Addr{}, fmt.Errorf("%w: empty", ErrEcho)
	}
	if strings.HasPrefix(text, "{") {
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			return netip.Addr{}, fmt.Errorf("%w: not JSON: %w", ErrEcho, err)
		}
		for _, k := range echoKeys {
			if s, ok := m[k].(string); ok {
				text = s
				break
			}
		}
		if strings.HasPrefix(text, "{") {
			return netip.Addr{}, fmt.Errorf("%w: JSON without an address field (%s)", ErrEcho, strings.Join(echoKeys, ", "))
		}
	}
	first, _, _ := strings.Cut(text, ",")
	addr, err := netip.ParseAddr(strings.TrimSpace(first))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %q is not an address", ErrEcho, truncate(first, 64))
	}
	return addr.Unmap(), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
