package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/server/gateway"
)

func TestParseUsername(t *testing.T) {
	cases := []struct {
		name, in string
		want     gateway.Selection
	}{
		{"empty", "", gateway.Selection{Selector: map[string]string{}}},
		{"any", "any", gateway.Selection{Selector: map[string]string{}}},
		{"issue example", "pool-web-geo-eu-session-a1b2-ns-team",
			gateway.Selection{Selector: map[string]string{"pool": "web", "geo": "eu"}, Session: "a1b2", Namespace: "team"}},
		{"escaped dash", "geo-eu%2Dwest-ns-team%2Da", gateway.Selection{Selector: map[string]string{"geo": "eu-west"}, Namespace: "team-a"}},
		{"label-style key", "topology.kubernetes.io%2Fzone-z1", gateway.Selection{Selector: map[string]string{"topology.kubernetes.io/zone": "z1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gateway.ParseUsername(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
	bad := []struct{ in, want string }{
		{"pool", "1 parts"},
		{"pool-web-geo", "3 parts"},
		{"pool-", "key pool has an empty value"},
		{"-web", "empty key at part 1"},
		{"pool-a-pool-b", "key pool given twice"},
		{"session-" + strings.Repeat("a", 129), "session"},
		{"ns-UPPER", `ns "UPPER" is not a namespace name`},
		{"p%zz-x", "bad percent-encoding"},
		{"k!y-v", "unknown key"},
		{"pool-a%0Ab", "control character"},
		{strings.Repeat("k-v-", 300) + "k-v", "longer than 1024 bytes"},
	}
	for _, tc := range bad {
		_, err := gateway.ParseUsername(tc.in)
		if !errors.Is(err, gateway.ErrUsername) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: %v, want ErrUsername saying %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseUsername(f *testing.F) {
	for _, s := range []string{"", "any", "pool-web-session-x", "a%2Db-c", "--", "ns-a-ns-b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := gateway.ParseUsername(s)
		if err != nil {
			if !errors.Is(err, gateway.ErrUsername) {
				t.Fatalf("error without ErrUsername: %v", err)
			}
			return
		}
		if len(sel.Selector) > 34 {
			t.Fatalf("%d selector pairs", len(sel.Selector))
		}
	})
}
