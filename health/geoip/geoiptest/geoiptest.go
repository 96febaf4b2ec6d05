// Package geoiptest writes small MaxMind-format databases with MaxMind's own writer library,
// for tests of everything that reads them. Only tests import it.
package geoiptest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Network is one entry: a CIDR and what the database says about it. Country is written to a
// Country database, ASN to an ASN one.
type Network struct {
	CIDR    string
	Country string
	ASN     uint32
}

// WriteCountry writes a GeoLite2-Country-shaped database holding nets to path (atomically:
// written beside it, then renamed over it, as a database updater does).
func WriteCountry(t testing.TB, path string, nets ...Network) {
	t.Helper()
	write(t, path, "GeoLite2-Country", nets, func(n Network) mmdbtype.DataType {
		return mmdbtype.Map{
			"country": mmdbtype.Map{"iso_code": mmdbtype.String(n.Country), "names": mmdbtype.Map{"en": mmdbtype.String(n.Country)}},
		}
	})
}

// WriteASN writes a GeoLite2-ASN-shaped database holding nets to path (atomically).
func WriteASN(t testing.TB, path string, nets ...Network) {
	t.Helper()
	write(t, path, "GeoLite2-ASN", nets, func(n Network) mmdbtype.DataType {
		return mmdbtype.Map{
			"autonomous_system_number":       mmdbtype.Uint32(n.ASN),
			"autonomous_system_organization": mmdbtype.String("AS" + strconv.FormatUint(uint64(n.ASN), 10) + " test network"),
		}
	})
}

func write(t testing.TB, path, dbType string, nets []Network, value func(Network) mmdbtype.DataType) {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType: dbType,
		// Tests use loopback and documentation ranges, which a real database leaves out.
		IncludeReservedNetworks: true,
		RecordSize:              24,
	})
	if err != nil {
		t.Fatalf("mmdbwriter.New: %v", err)
	}
	for _, n := range nets {
		_, ipnet, err := net.ParseCIDR(n.CIDR)
		if err != nil {
			t.Fatalf("network %q: %v", n.CIDR, err)
		}
		if err := tree.Insert(ipnet, value(n)); err != nil {
			t.Fatalf("insert %s: %v", n.CIDR, err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mmdb-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.WriteTo(tmp); err != nil {
		t.Fatalf("write database: %v", err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}
