package lease

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/google/btree"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

// maxSelectorCache bounds the memo of selector -> buckets; it is cleared when full, since
// crawlers use a handful of selectors and a flood of distinct ones only costs a rescan.
const maxSelectorCache = 1024

// entry is one proxy in the index.
type entry struct {
	p       fleet.Proxy
	load    int
	healthy bool  // leasable by the last verdict the index saw
	denied  bool  // refused by Config.Admit: never leased
	latency int64 // from that verdict
	rank    int   // the verdict's band (v1.BandRank), 0 when bands are not preferred
	bucket  *bucket
	inTree  bool
}

// bucket holds the proxies with one exact attribute set. Those that can take a lease by the
// index's view sit in tree; the others are only counted, for the 409 answer.
type bucket struct {
	key       string
	ns        string // buckets are per namespace too, so a lease can be scoped to namespaces
	attrs     map[string]string
	tree      *btree.BTreeG[*entry]
	size      int
	unhealthy int
	full      int
}

// less orders a bucket's tree: best quality band, then fewest leases, then lowest latency,
// then key for a stable order.
func less(a, b *entry) bool {
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	if a.load != b.load {
		return a.load < b.load
	}
	if a.latency != b.latency {
		return a.latency < b.latency
	}
	return a.p.Key < b.p.Key
}

// attrKey is a canonical string for an attribute set or selector.
func attrKey(attrs map[string]string) string {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(attrs[k])
		b.WriteByte(0)
	}
	return b.String()
}

// attach files e in the bucket for its attributes, creating it when new.
func (m *Memory) attach(e *entry) {
	ns := namespaceOf(e.p.Key)
	k := ns + "\x01" + attrKey(e.p.Attributes)
	b := m.buckets[k]
	if b == nil {
		b = &bucket{key: k, ns: ns, attrs: maps.Clone(e.p.Attributes), tree: btree.NewG(16, less)}
		m.buckets[k] = b
		clear(m.selCache)
	}
	e.bucket = b
	b.size++
	m.place(e)
}

// detach takes e out of its bucket, dropping the bucket when empty.
func (m *Memory) detach(e *entry) {
	b := e.bucket
	if b == nil {
		return
	}
	m.unplace(e)
	b.size--
	e.bucket = nil
	if b.size == 0 {
		delete(m.buckets, b.key)
		clear(m.selCache)
	}
}

// place puts e in its bucket's tree or counters according to its fields.
func (m *Memory) place(e *entry) {
	b := e.bucket
	switch {
	case !e.healthy:
		b.unhealthy++
	case e.load >= int(e.p.MaxLeases):
		b.full++
	default:
		b.tree.ReplaceOrInsert(e)
		e.inTree = true
	}
}

func (m *Memory) unplace(e *entry) {
	b := e.bucket
	switch {
	case e.inTree:
		b.tree.Delete(e)
		e.inTree = false
	case !e.healthy:
		b.unhealthy--
	default:
		b.full--
	}
}

// move changes fields that order e: it must leave the tree before they change.
func (m *Memory) move(e *entry, change func()) {
	if e.bucket == nil {
		change()
		return
	}
	m.unplace(e)
	change()
	m.place(e)
}

// match returns the buckets whose attributes contain the selector.
func (m *Memory) match(sel map[string]string) []*bucket {
	k := attrKey(sel)
	if bs, ok := m.selCache[k]; ok {
		return bs
	}
	var bs []*bucket
	for _, b := range m.buckets {
		if fleet.Matches(b.attrs, sel) {
			bs = append(bs, b)
		}
	}
	if len(m.selCache) >= maxSelectorCache {
		clear(m.selCache)
	}
	m.selCache[k] = bs
	return bs
}

// namespaceOf is the namespace part of a "namespace/name" key.
func namespaceOf(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}
