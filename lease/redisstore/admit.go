package redisstore

import (
	"crypto/sha256"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

const (
	// deniedFor is how long a record the egress policy denied is skipped before it is checked
	// again (its record may have been fixed by then).
	deniedFor = time.Minute
	// maxDenied bounds the denied records remembered (and passed to every acquire); beyond
	// it the newest is still refused when granted, only not skipped in advance.
	maxDenied = 1024
	// maxWarned bounds the records already logged.
	maxWarned = 4096
)

// denied is what the store remembers of the records Admit refused: the keys to skip until a
// time, and which record versions were already logged.
type denied struct {
	mu     sync.Mutex
	until  map[string]time.Time
	warned map[[32]byte]struct{}
	joined string // the keys of until, newline-separated; rebuilt on change
	dirty  bool
	count  atomic.Uint64
}

// list is the keys to skip now, newline-separated (the acquire script's ARGV 11).
func (d *denied) list(now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, t := range d.until {
		if !now.Before(t) {
			delete(d.until, k)
			d.dirty = true
		}
	}
	if d.dirty {
		d.joined = strings.Join(slices.Sorted(maps.Keys(d.until)), "\n")
		d.dirty = false
	}
	return d.joined
}

// note remembers a refused record; it reports whether that record was not logged before.
func (d *denied) note(key, record string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count.Add(1)
	if d.until == nil {
		d.until, d.warned = map[string]time.Time{}, map[[32]byte]struct{}{}
	}
	if _, ok := d.until[key]; ok || len(d.until) < maxDenied {
		d.until[key] = now.Add(deniedFor)
		d.dirty = true
	}
	sum := sha256.Sum256([]byte(key + "\x00" + record))
	if _, ok := d.warned[sum]; ok {
		return false
	}
	if len(d.warned) >= maxWarned {
		clear(d.warned)
	}
	d.warned[sum] = struct{}{}
	return true
}

// admit asks Config.Admit about a record a script chose; a refusal is remembered, counted
// and logged once per record.
func (s *Store) admit(p fleet.Proxy, record string) error {
	if s.cfg.Admit == nil {
		return nil
	}
	err := s.cfg.Admit(p)
	if err != nil && s.deny.note(p.Key, record, time.Now()) {
		s.cfg.Log.Warn("lease store record denied by the egress policy; never leased", "proxy", p.Key, "err", err)
	}
	return err
}

// DeniedRecords is how many grants the egress policy refused (an optional capability of a
// Store, read by the discovery metrics).
func (s *Store) DeniedRecords() uint64 { return s.deny.count.Load() }
