package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestCheckHost(t *testing.T) {
	def, err := New(Config{OwnListeners: []string{":8090", "127.0.0.1:8080", "localhost:9090"}})
	if err != nil {
		t.Fatal(err)
	}
	loop, err := New(Config{AllowLoopback: true, OwnListeners: []string{":8090", "127.0.0.1:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := New(Config{ExternalCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}, LoopbackProviders: []string{"mock"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		pol  *Policy
		host string
		port uint16
		dest Dest
		want error // nil, ErrDenied or ErrInvalidHost
	}{
		{"public address", def, "203.0.113.7", 3128, Dest{External: true}, nil},
		{"private address", def, "10.1.2.3", 3128, Dest{}, nil},
		{"dns name", def, "proxy-1.example.com", 3128, Dest{External: true}, nil},
		{"trailing dot", def, "proxy-1.example.com.", 3128, Dest{External: true}, nil},
		{"space", def, "a b", 3128, Dest{External: true}, ErrInvalidHost},
		{"url", def, "http://x", 3128, Dest{External: true}, ErrInvalidHost},
		{"empty", def, "", 3128, Dest{External: true}, ErrInvalidHost},
		{"leading hyphen", def, "-x.example", 3128, Dest{External: true}, ErrInvalidHost},
		{"long label", def, "a123456789012345678901234567890123456789012345678901234567890123.example", 3128, Dest{External: true}, ErrInvalidHost},
		{"aws metadata", def, "169.254.169.254", 80, Dest{External: true}, ErrDenied},
		{"ecs metadata", def, "169.254.170.2", 80, Dest{}, ErrDenied},
		{"mapped metadata", def, "::ffff:169.254.169.254", 80, Dest{External: true}, ErrDenied},
		{"aws ipv6 metadata", def, "fd00:ec2::254", 80, Dest{External: true}, ErrDenied},
		{"gcp ipv6 metadata", def, "fd20:ce::254", 80, Dest{External: true}, ErrDenied},
		{"azure wire server", def, "168.63.129.16", 80, Dest{External: true}, ErrDenied},
		{"mapped metadata hex", def, "::ffff:a9fe:a9fe", 80, Dest{External: true}, ErrDenied},
		{"ipv4-compatible metadata", def, "::a9fe:a9fe", 80, Dest{External: true}, ErrDenied},
		{"nat64 metadata", def, "64:ff9b::a9fe:a9fe", 80, Dest{External: true}, ErrDenied},
		{"nat64 dotted metadata", def, "64:ff9b::169.254.169.254", 80, Dest{External: true}, ErrDenied},
		{"nat64 local-use metadata", def, "64:ff9b:1::a9fe:a9fe", 80, Dest{External: true}, ErrDenied},
		{"6to4 metadata", def, "2002:a9fe:a9fe::1", 80, Dest{External: true}, ErrDenied},
		{"nat64 azure wire server", def, "64:ff9b::a83f:8110", 80, Dest{External: true}, ErrDenied},
		{"nat64 loopback denied", def, "64:ff9b::7f00:1", 3128, Dest{}, ErrDenied},
		{"nat64 public address", def, "64:ff9b::cb00:7107", 3128, Dest{External: true}, nil},
		{"6to4 public address", def, "2002:cb00:7107::1", 3128, Dest{External: true}, nil},
		{"global ipv6", def, "2001:db8::1", 3128, Dest{External: true}, nil},
		{"alibaba metadata", def, "100.100.100.200", 80, Dest{External: true}, ErrDenied},
		{"gcp metadata name", def, "metadata.google.internal", 80, Dest{External: true}, ErrDenied},
		{"gcp metadata name upper dot", def, "Metadata.Google.Internal.", 80, Dest{External: true}, ErrDenied},
		{"ipv6 link-local", def, "fe80::1", 3128, Dest{External: true}, ErrDenied},
		{"unspecified", def, "0.0.0.0", 3128, Dest{External: true}, ErrDenied},
		{"multicast", def, "224.0.0.1", 3128, Dest{External: true}, ErrDenied},
		{"broadcast", def, "255.255.255.255", 3128, Dest{External: true}, ErrDenied},
		{"loopback denied by default", def, "127.0.0.1", 3128, Dest{}, ErrDenied},
		{"loopback v6 denied by default", def, "::1", 3128, Dest{}, ErrDenied},
		{"localhost denied by default", def, "localhost", 3128, Dest{}, ErrDenied},
		{"loopback allowed", loop, "127.3.4.5", 3128, Dest{}, nil},
		{"own listener exact", loop, "127.0.0.1", 8080, Dest{}, ErrDenied},
		{"own listener on every interface", loop, "127.9.9.9", 8090, Dest{}, ErrDenied},
		{"own listener port elsewhere", loop, "10.0.0.1", 8090, Dest{}, nil},
		{"own port other address", loop, "127.0.0.2", 8080, Dest{}, nil},
		{"external inside allow-list", ext, "10.20.3.4", 3128, Dest{External: true}, nil},
		{"external outside allow-list", ext, "10.21.3.4", 3128, Dest{External: true}, ErrDenied},
		{"managed ignores external allow-list", ext, "10.21.3.4", 3128, Dest{}, nil},
		{"mock instance on loopback", ext, "127.3.4.5", 3128, Dest{Provider: "mock"}, nil},
		{"gcp instance on loopback", ext, "127.3.4.5", 3128, Dest{Provider: "gcp"}, ErrDenied},
		{"external on loopback beside a mock provider", ext, "127.3.4.5", 3128, Dest{External: true, Provider: "mock"}, ErrDenied},
		{"external name passes statically", ext, "proxy.example.com", 3128, Dest{External: true}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.pol.CheckHost(tc.host, tc.port, tc.dest)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("CheckHost(%q, %d, %+v) = %v, want %v", tc.host, tc.port, tc.dest, err, tc.want)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for _, l := range []string{"8080", "host:port", ":99999"} {
		if _, err := New(Config{OwnListeners: []string{l}}); err == nil {
			t.Errorf("New with own listener %q: no error", l)
		}
	}
	if _, err := ParseCIDRs("10.0.0.0/8, nope"); err == nil {
		t.Error("ParseCIDRs accepted nope")
	}
	got, err := ParseCIDRs(" 10.0.0.0/8,,192.168.0.0/16 ")
	if err != nil || len(got) != 2 {
		t.Errorf("ParseCIDRs = %v, %v; want two prefixes", got, err)
	}
}

// TestControlChecksResolvedAddress dials a name: the check sees the address DNS gave, so a
// name cannot smuggle a denied address past the static check.
func TestControlChecksResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	pol, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{ControlContext: pol.Control}
	c, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if err == nil {
		c.Close()
		t.Fatal("dial to localhost allowed, want denied after resolution")
	}
	var de *DeniedError
	if !errors.As(err, &de) {
		t.Fatalf("dial error %v, want a *DeniedError", err)
	}
	allow, _ := New(Config{AllowLoopback: true})
	d = &net.Dialer{ControlContext: allow.Control}
	c, err = d.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial with loopback allowed: %v", err)
	}
	c.Close()
	// The External allow-list travels in the context.
	ext, _ := New(Config{AllowLoopback: true, ExternalCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	d = &net.Dialer{ControlContext: ext.Control}
	if c, err := d.DialContext(WithDest(context.Background(), Dest{External: true}), "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("External dial outside the allow-list allowed")
	}
	c, err = d.DialContext(WithDest(context.Background(), Dest{}), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("Managed dial: %v", err)
	}
	c.Close()
}
