package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// HostAddr reads host as an address the way resolvers and HTTP clients do, not only as Go's
// netip does: a literal IPv4 or IPv6 address, with or without a trailing dot, and the numeric
// IPv4 forms of inet_aton(3) that curl, browsers and libc accept (2852039166, 0xa9fea9fe,
// 0251.0376.0251.0376, 127.1, 10.1.258). ok is false for a name. A host whose last label is
// numeric but is no address (1.2.3.4.5, 0x1g is a name) is an error: no DNS name ends in a
// numeric label (RFC 3696 2), and every such host is a try at an address.
func HostAddr(host string) (a netip.Addr, ok bool, err error) {
	h := strings.TrimSuffix(host, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true, nil
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		if a, err := netip.ParseAddr(h[1 : len(h)-1]); err == nil {
			return a, true, nil
		}
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if !numericLabel(last) {
		return netip.Addr{}, false, nil
	}
	if a, ok := parseInetAton(h); ok {
		return a, true, nil
	}
	return netip.Addr{}, false, fmt.Errorf("%w %q: a numeric last label, but not an IPv4 address", ErrInvalidHost, host)
}

// numericLabel says whether a label reads as a number to inet_aton: decimal digits, or 0x
// and hex digits.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for _, c := range l[2:] {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseInetAton is inet_aton(3): one to four parts, each decimal, octal (leading 0) or hex
// (0x); the last part fills the bytes the others left.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" {
			return netip.Addr{}, false
		}
		base, digits := 10, p
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0" // inet_aton reads a bare 0x as 0
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n |= v << (24 - 8*i)
	}
	lastBits := 32 - 8*(len(vals)-1)
	last := vals[len(vals)-1]
	if last >= 1<<lastBits {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}
