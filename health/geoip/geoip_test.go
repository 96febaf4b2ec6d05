package geoip_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/health/geoip"
	"github.com/proxy-operator/proxy-operator/health/geoip/geoiptest"
)

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	country, asn := filepath.Join(dir, "country.mmdb"), filepath.Join(dir, "asn.mmdb")
	geoiptest.WriteCountry(t, country,
		geoiptest.Network{CIDR: "127.0.1.0/24", Country: "us"},
		geoiptest.Network{CIDR: "2001:db8::/32", Country: "DE"})
	geoiptest.WriteASN(t, asn, geoiptest.Network{CIDR: "127.0.1.0/25", ASN: 64500})
	r, err := geoip.Open(geoip.Config{CountryPath: country, ASNPath: asn})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		addr string
		want geoip.Info
	}{
		{"both known, code upper-cased", "127.0.1.9", geoip.Info{Country: "US", ASN: 64500}},
		{"country only", "127.0.1.200", geoip.Info{Country: "US"}},
		{"unknown address", "127.0.9.1", geoip.Info{}},
		{"ipv6", "2001:db8::1", geoip.Info{Country: "DE"}},
		{"ipv4-mapped ipv6 is the ipv4 address", "::ffff:127.0.1.9", geoip.Info{Country: "US", ASN: 64500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Lookup(netip.MustParseAddr(tc.addr))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Lookup(%s) = %+v, want %+v", tc.addr, got, tc.want)
			}
		})
	}
}

func TestOpenRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	asn := filepath.Join(dir, "asn.mmdb")
	geoiptest.WriteASN(t, asn, geoiptest.Network{CIDR: "127.0.0.0/8", ASN: 1})
	junk := filepath.Join(dir, "junk.mmdb")
	if err := os.WriteFile(junk, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  geoip.Config
	}{
		{"missing file", geoip.Config{CountryPath: filepath.Join(dir, "absent.mmdb")}},
		{"not a MaxMind file", geoip.Config{ASNPath: junk}},
		{"ASN file given as the country database", geoip.Config{CountryPath: asn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := geoip.Open(tc.cfg)
			if !errors.Is(err, geoip.ErrDatabase) {
				t.Fatalf("Open = %v, want ErrDatabase", err)
			}
		})
	}
	r, err := geoip.Open(geoip.Config{})
	if err != nil || r.Enabled() {
		t.Fatalf("Open(no files) = enabled %v, %v; want a disabled resolver", r.Enabled(), err)
	}
}

// TestReload replaces the file the way a database updater does (a rename over it) and waits
// for Run to serve the new answers; a broken replacement keeps the previous database.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "country.mmdb")
	geoiptest.WriteCountry(t, path, geoiptest.Network{CIDR: "127.0.2.0/24", Country: "US"})
	r, err := geoip.Open(geoip.Config{CountryPath: path, CheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- r.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	addr := netip.MustParseAddr("127.0.2.7")
	geoiptest.WriteCountry(t, path, geoiptest.Network{CIDR: "127.0.2.0/24", Country: "FR"})
	waitCountry(t, r, addr, "FR")

	// A truncated file is refused; lookups go on with the database already loaded.
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); !errors.Is(err, geoip.ErrDatabase) {
		t.Fatalf("Reload(garbage) = %v, want ErrDatabase", err)
	}
	if got, _ := r.Lookup(addr); got.Country != "FR" {
		t.Fatalf("after a bad file, country = %q, want FR kept", got.Country)
	}
	geoiptest.WriteCountry(t, path, geoiptest.Network{CIDR: "127.0.2.0/24", Country: "JP"})
	waitCountry(t, r, addr, "JP")
}

func waitCountry(t *testing.T, r *geoip.Resolver, addr netip.Addr, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := r.Lookup(addr)
		if err != nil {
			t.Fatal(err)
		}
		if got.Country == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("country of %s still %q, want %q after reload", addr, got.Country, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
