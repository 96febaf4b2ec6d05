package gateway

import "testing"

// TestMarkerValue: an upstream's error marker reaches the client only as an error code (and
// errno); an address or host name in it never does (issue 30).
func TestMarkerValue(t *testing.T) {
	for in, want := range map[string]string{
		"ERR_CONNECT_FAIL 111":  "ERR_CONNECT_FAIL 111",
		"ERR_ACCESS_DENIED 0":   "ERR_ACCESS_DENIED 0",
		"relay":                 "relay",
		"ERR_DNS_FAIL 10.0.0.5": "ERR_DNS_FAIL",
		"10.0.0.5":              "upstream",
		"squid.internal:3128":   "upstream",
		"ERR at 10.1.2.3:3128":  "ERR",
		"":                      "upstream",
	} {
		if got := markerValue(in); got != want {
			t.Errorf("markerValue(%q) = %q, want %q", in, got, want)
		}
	}
}
