// Package geoip owns the operator's view of MaxMind-format databases: it answers an exit
// address's country (from a GeoIP2/GeoLite2 Country or City file) and autonomous system
// (from an ASN file), and reloads a file when it changes on disk. It never downloads a
// database and knows nothing of proxies or probes.
package geoip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/oschwald/maxminddb-golang/v2"
)

var (
	// ErrDatabase is wrapped by every error about a database file: unreadable, too large,
	// not MaxMind-format, or of the wrong kind.
	ErrDatabase = errors.New("geoip: bad database")
)

// MaxFileBytes bounds a database file: a GeoIP2 City file is about 70 MB, so anything
// beyond this is not a database we should hold in memory.
const MaxFileBytes = 512 << 20

// DefaultCheckInterval is how often Run looks at the files for a change.
const DefaultCheckInterval = 30 * time.Second

// Info is what the databases say about one address. Zero fields are unknown.
type Info struct {
	// Country is the ISO 3166-1 alpha-2 code, upper case.
	Country string
	// ASN is the autonomous system number.
	ASN uint32
}

// Kind is the kind of database a file must be.
type Kind int

const (
	// KindCountry is a Country or City database (country.iso_code).
	KindCountry Kind = iota
	// KindASN is an ASN database (autonomous_system_number).
	KindASN
)

func (k Kind) String() string {
	if k == KindASN {
		return "ASN"
	}
	return "Country"
}

// Config names the files; either may be empty.
type Config struct {
	CountryPath string
	ASNPath     string
	// CheckInterval paces Run (0: DefaultCheckInterval).
	CheckInterval time.Duration
	Log           *slog.Logger
}

// Resolver answers lookups from the configured files. Lookups are safe for concurrent use
// and never wait on a reload: a reload swaps a fully read database in.
type Resolver struct {
	files    []*file
	interval time.Duration
	log      *slog.Logger
}

type file struct {
	path string
	kind Kind

	mu     sync.RWMutex
	reader *maxminddb.Reader
	stamp  stamp
}

// stamp identifies a version of a file on disk: a rename over it or a rewrite changes it.
type stamp struct {
	size    int64
	modTime time.Time
	ino     uint64
}

// Open reads every configured file and fails on the first that cannot be used, naming it.
// With neither path set it returns a Resolver that knows nothing (Enabled false).
func Open(cfg Config) (*Resolver, error) {
	r := &Resolver{interval: cfg.CheckInterval, log: cfg.Log}
	if r.interval <= 0 {
		r.interval = DefaultCheckInterval
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for _, f := range []*file{{path: cfg.CountryPath, kind: KindCountry}, {path: cfg.ASNPath, kind: KindASN}} {
		if f.path == "" {
			continue
		}
		if _, err := f.load(); err != nil {
			return nil, err
		}
		r.files = append(r.files, f)
	}
	return r, nil
}

// Enabled reports whether any database is configured.
func (r *Resolver) Enabled() bool { return r != nil && len(r.files) > 0 }

// Has reports whether a database of this kind is configured.
func (r *Resolver) Has(k Kind) bool {
	if r == nil {
		return false
	}
	for _, f := range r.files {
		if f.kind == k {
			return true
		}
	}
	return false
}

// Lookup returns what the databases say about addr; a field the databases do not know stays
// zero. An error means a database could not be read at that address (a corrupt file).
func (r *Resolver) Lookup(addr netip.Addr) (Info, error) {
	var info Info
	if r == nil {
		return info, nil
	}
	addr = addr.Unmap()
	for _, f := range r.files {
		if err := f.lookup(addr, &info); err != nil {
			return Info{}, err
		}
	}
	return info, nil
}

type countryRecord struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
}

type asnRecord struct {
	ASN uint32 `maxminddb:"autonomous_system_number"`
}

func (f *file) lookup(addr netip.Addr, info *Info) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	res := f.reader.Lookup(addr)
	if err := res.Err(); err != nil {
		return fmt.Errorf("%w: %s: lookup %s: %w", ErrDatabase, f.path, addr, err)
	}
	if !res.Found() {
		return nil
	}
	switch f.kind {
	case KindCountry:
		var rec countryRecord
		if err := res.Decode(&rec); err != nil {
			return fmt.Errorf("%w: %s: decode %s: %w", ErrDatabase, f.path, addr, err)
		}
		info.Country = strings.ToUpper(rec.Country.ISOCode)
	case KindASN:
		var rec asnRecord
		if err := res.Decode(&rec); err != nil {
			return fmt.Errorf("%w: %s: decode %s: %w", ErrDatabase, f.path, addr, err)
		}
		info.ASN = rec.ASN
	}
	return nil
}

// load reads the file if it changed since the last load and swaps it in; it reports whether
// it did. On any error the previous database stays.
func (f *file) load() (bool, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return false, fmt.Errorf("%w: %s database: %w", ErrDatabase, f.kind, err)
	}
	defer func() { _ = fh.Close() }()
	fi, err := fh.Stat()
	if err != nil {
		return false, fmt.Errorf("%w: %s database: %w", ErrDatabase, f.kind, err)
	}
	st := stamp{size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}
	f.mu.RLock()
	same := f.reader != nil && f.stamp == st
	f.mu.RUnlock()
	if same {
		return false, nil
	}
	if fi.Size() > MaxFileBytes {
		return false, fmt.Errorf("%w: %s database %s is %d bytes, more than %d", ErrDatabase, f.kind, f.path, fi.Size(), MaxFileBytes)
	}
	// Read into memory rather than mmap: a reader being replaced may still be answering a
	// lookup, and a Go buffer simply stays alive until it is done.
	buf, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return false, fmt.Errorf("%w: %s database %s: %w", ErrDatabase, f.kind, f.path, err)
	}
	rd, err := maxminddb.OpenBytes(buf)
	if err != nil {
		return false, fmt.Errorf("%w: %s database %s is not a MaxMind-format file: %w", ErrDatabase, f.kind, f.path, err)
	}
	if err := checkKind(f.kind, rd.Metadata.DatabaseType); err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrDatabase, f.path, err)
	}
	f.mu.Lock()
	f.reader, f.stamp = rd, st
	f.mu.Unlock()
	return true, nil
}

// checkKind refuses a file of the other kind, the likeliest mix-up (-geoip-db given the ASN
// file): its lookups would silently find nothing.
func checkKind(k Kind, dbType string) error {
	t := strings.ToLower(dbType)
	switch k {
	case KindCountry:
		if !strings.Contains(t, "country") && !strings.Contains(t, "city") {
			return fmt.Errorf("database type %q is not a Country or City database", dbType)
		}
	case KindASN:
		if !strings.Contains(t, "asn") {
			return fmt.Errorf("database type %q is not an ASN database", dbType)
		}
	}
	return nil
}

// Reload re-reads every file that changed on disk and reports how many it swapped in. A file
// that became unreadable or invalid keeps its previous database; the errors are joined.
func (r *Resolver) Reload() (int, error) {
	if r == nil {
		return 0, nil
	}
	n := 0
	var errs []error
	for _, f := range r.files {
		ok, err := f.load()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
			r.log.Info("geoip database reloaded", "kind", f.kind.String(), "path", f.path)
		}
	}
	return n, errors.Join(errs...)
}

// Run reloads changed files every CheckInterval until ctx ends; it returns nil.
func (r *Resolver) Run(ctx context.Context) error {
	if !r.Enabled() {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := r.Reload(); err != nil {
				r.log.Error("geoip database not reloaded; the previous one stays", "err", err)
			}
		}
	}
}
