package netpolicy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestHostAddr(t *testing.T) {
	tests := []struct {
		host    string
		want    string // "" for a name
		wantErr bool
	}{
		{"169.254.169.254", "169.254.169.254", false},
		{"169.254.169.254.", "169.254.169.254", false},
		{"2852039166", "169.254.169.254", false},
		{"0xa9fea9fe", "169.254.169.254", false},
		{"0XA9FEA9FE", "169.254.169.254", false},
		{"0251.0376.0251.0376", "169.254.169.254", false},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254", false},
		{"169.16689662", "169.254.169.254", false},
		{"169.254.43518", "169.254.169.254", false},
		{"127.1", "127.0.0.1", false},
		{"0", "0.0.0.0", false},
		{"0x", "0.0.0.0", false},
		{"[::1]", "::1", false},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1", false},
		{"example.com", "", false},
		{"0x1g.example", "", false},
		{"1a.example.com.", "", false},
		{"1.2.3.4.5", "", true},
		{"256.1.1.1", "", true},
		{"4294967296", "", true},
		{"08.1.1.1", "", true},
		{"site.123", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			a, ok, err := HostAddr(tc.host)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidHost) {
					t.Fatalf("HostAddr(%q) = %v, %v, %v; want ErrInvalidHost", tc.host, a, ok, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("HostAddr(%q): %v", tc.host, err)
			}
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("HostAddr(%q) = %q, want %q", tc.host, got, tc.want)
			}
		})
	}
}

// TestCheckHostNumericForms: the sync-time check of a proxy endpoint read numeric hosts as
// names and let them through (issue 30, item 7).
func TestCheckHostNumericForms(t *testing.T) {
	pol, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.169.254.", "127.1", "0x7f000001", "1.2.3.4.5"} {
		if err := pol.CheckHost(h, 3128, Dest{External: true}); err == nil {
			t.Errorf("CheckHost(%q) allowed, want denied or invalid", h)
		}
	}
}

func TestCheckTarget(t *testing.T) {
	def, err := New(Config{OwnListeners: []string{":8090", "127.0.0.1:8080"}, Protected: []string{"10.0.0.5:6379", "redis.store.svc:6379", "redis.example.com:6379"}})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := New(Config{OwnListeners: []string{":8090", "127.0.0.1:8080"}, Protected: []string{"127.0.0.1:6379"},
		TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	if err != nil {
		t.Fatal(err)
	}
	custom, err := New(Config{ClusterSuffixes: []string{".corp.example."}})
	if err != nil {
		t.Fatal(err)
	}
	demo, err := New(Config{OwnListeners: []string{"127.0.0.1:8080"}, TargetAllowAddrs: []string{"127.0.0.1:8092", "127.0.0.1:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		pol  *Policy
		host string
		port uint16
		want error
	}{
		{"public name", def, "example.com", 443, nil},
		{"public name trailing dot", def, "example.com.", 443, nil},
		{"public address", def, "203.0.113.7", 80, nil},
		{"public ipv6", def, "2606:4700::1111", 443, nil},
		{"loopback", def, "127.0.0.1", 6379, ErrDenied},
		{"loopback short", def, "127.1", 6379, ErrDenied},
		{"loopback decimal", def, "2130706433", 6379, ErrDenied},
		{"loopback hex", def, "0x7f000001", 6379, ErrDenied},
		{"loopback octal", def, "0177.0.0.1", 6379, ErrDenied},
		{"loopback v6", def, "::1", 6379, ErrDenied},
		{"loopback v6 brackets", def, "[::1]", 6379, ErrDenied},
		{"mapped loopback", def, "::ffff:127.0.0.1", 6379, ErrDenied},
		{"mapped loopback hex", def, "::ffff:7f00:1", 6379, ErrDenied},
		{"nat64 loopback", def, "64:ff9b::7f00:1", 6379, ErrDenied},
		{"nat64 private", def, "64:ff9b::a00:5", 6379, ErrDenied},
		{"metadata", def, "169.254.169.254", 80, ErrDenied},
		{"metadata trailing dot", def, "169.254.169.254.", 80, ErrDenied},
		{"metadata decimal", def, "2852039166", 80, ErrDenied},
		{"metadata hex", def, "0xa9fea9fe", 80, ErrDenied},
		{"metadata octal", def, "0251.0376.0251.0376", 80, ErrDenied},
		{"metadata v6", def, "fd00:ec2::254", 80, ErrDenied},
		{"metadata name", def, "metadata.google.internal.", 80, ErrDenied},
		{"rfc1918 10", def, "10.1.2.3", 80, ErrDenied},
		{"rfc1918 172", def, "172.16.0.1", 80, ErrDenied},
		{"rfc1918 192", def, "192.168.1.1", 80, ErrDenied},
		{"cgnat", def, "100.64.0.1", 80, ErrDenied},
		{"ula", def, "fd12::1", 80, ErrDenied},
		{"unspecified", def, "0.0.0.0", 80, ErrDenied},
		{"zero short", def, "0", 80, ErrDenied},
		{"reserved", def, "240.0.0.1", 80, ErrDenied},
		{"localhost", def, "localhost", 80, ErrDenied},
		{"localhost dot", def, "LocalHost.", 80, ErrDenied},
		{"sub localhost", def, "redis.localhost", 80, ErrDenied},
		{"single label", def, "redis", 6379, ErrDenied},
		{"svc", def, "redis.default.svc", 6379, ErrDenied},
		{"svc cluster local", def, "redis.default.svc.cluster.local.", 6379, ErrDenied},
		{"internal", def, "db.internal", 5432, ErrDenied},
		{"protected address", def, "10.0.0.5", 6379, ErrDenied},
		{"protected name", def, "Redis.Example.COM.", 6379, ErrDenied},
		{"protected name other port", def, "redis.example.com", 443, nil},
		{"numeric tail name", def, "example.123", 80, ErrInvalidHost},
		{"bad name", def, "a b", 80, ErrInvalidHost},
		{"allowed loopback", tests, "127.0.0.1", 9999, nil},
		{"allowed loopback short", tests, "127.1", 9999, nil},
		{"allowed localhost", tests, "localhost", 9999, nil},
		{"allowed v6 loopback", tests, "[::1]", 9999, nil},
		{"allowed mapped", tests, "::ffff:127.0.0.2", 9999, nil},
		{"own listener stays denied", tests, "127.0.0.1", 8080, ErrDenied},
		{"own wildcard port stays denied", tests, "127.4.5.6", 8090, ErrDenied},
		{"own port in decimal form", tests, "2130706433", 8080, ErrDenied},
		{"store stays denied", tests, "127.0.0.1", 6379, ErrDenied},
		{"store via mapped", tests, "::ffff:127.0.0.1", 6379, ErrDenied},
		{"metadata stays denied", tests, "169.254.169.254", 80, ErrDenied},
		{"private outside allow", tests, "10.0.0.1", 80, ErrDenied},
		{"custom suffix", custom, "git.corp.example", 443, ErrDenied},
		{"custom replaces defaults", custom, "redis.default.svc", 443, nil},
		{"demo site allowed", demo, "127.0.0.1", 8092, nil},
		{"demo site mapped", demo, "::ffff:127.0.0.1", 8092, nil},
		{"demo host other port", demo, "127.0.0.1", 6379, ErrDenied},
		{"demo port other host", demo, "127.0.0.2", 8092, ErrDenied},
		{"demo site by name is a name", demo, "localhost", 8092, ErrDenied},
		{"own listener beats the allowed address", demo, "127.0.0.1", 8080, ErrDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.pol.CheckTarget(tc.host, tc.port)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("CheckTarget(%q, %d) = %v, want %v", tc.host, tc.port, err, tc.want)
			}
		})
	}
}

func TestTargetAllowAddrsMustBeIPPort(t *testing.T) {
	for _, bad := range []string{"localhost:8092", "127.0.0.1", ":8092"} {
		if _, err := New(Config{TargetAllowAddrs: []string{bad}}); err == nil {
			t.Errorf("New with TargetAllowAddrs %q: no error", bad)
		}
	}
}

func TestParseSuffixes(t *testing.T) {
	got, err := ParseSuffixes(" .svc, cluster.local., ,Internal")
	if err != nil || len(got) != 3 || got[0] != "svc" || got[1] != "cluster.local" || got[2] != "internal" {
		t.Errorf("ParseSuffixes = %v, %v", got, err)
	}
	if _, err := ParseSuffixes("a b"); err == nil {
		t.Error("ParseSuffixes accepted a b")
	}
}
