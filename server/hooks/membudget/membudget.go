// Package membudget owns the hook memory budget: how many bytes of request bodies, weighted
// by what decoding them costs, may be held at once, sized from the process's memory limit.
// It knows nothing of HTTP routes or of what the bodies mean.
package membudget

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// ErrOverBudget is returned when a body does not fit in what is left of the budget now.
var ErrOverBudget = errors.New("memory budget exhausted")

// ErrTooLarge is returned for a body longer than the read's limit.
var ErrTooLarge = errors.New("body too large")

// Defaults.
const (
	// DefaultFactor is how many bytes of heap one byte of hook body costs once decoded, its
	// shape apart (ShapeWeight charges objects and keys): 4 MB of long strings costs about 5x,
	// a real pool's members about 9x of which the objects are charged apart.
	DefaultFactor = 8
	// DefaultFraction of the memory limit goes to hook bodies; the rest is for the fleet
	// view, the lease store, discovery and the runtime.
	DefaultFraction = 0.25
	// FallbackLimit is assumed when neither GOMEMLIMIT nor a cgroup sets a limit.
	FallbackLimit = 1 << 30
	// chunk is how much is reserved ahead of each read.
	chunk = 32 << 10
)

// Budget is a weighted semaphore over bytes of memory.
type Budget struct {
	sem    *semaphore.Weighted
	size   int64
	factor int64
	used   atomic.Int64 // for messages and the metric; the semaphore is the truth
}

// New returns a budget of size bytes; a body of n bytes weighs n*factor (factor < 1: 1).
func New(size int64, factor int) *Budget {
	if factor < 1 {
		factor = 1
	}
	return &Budget{sem: semaphore.NewWeighted(size), size: size, factor: int64(factor)}
}

// InUse is the weight held now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Size is the budget in bytes.
func (b *Budget) Size() int64 { return b.size }

// MaxBody is the longest body the budget could ever hold.
func (b *Budget) MaxBody() int64 { return b.size / b.factor }

// Reservation is the share of the budget a read body holds until Release.
type Reservation struct {
	b    *Budget
	held int64
}

// Release returns the reservation to the budget; it may be called more than once.
func (r *Reservation) Release() {
	if r == nil || r.held == 0 {
		return
	}
	r.b.used.Add(-r.held)
	r.b.sem.Release(r.held)
	r.held = 0
}

// Grow adds w to the reservation now, never waiting: ErrOverBudget (and nothing added) when it
// does not fit what is left, ErrTooLarge when it could never fit the whole budget.
func (r *Reservation) Grow(w int64) error {
	if w <= 0 {
		return nil
	}
	if r.held+w > r.b.size {
		return fmt.Errorf("%w: decoding needs about %d bytes, the budget is %d", ErrTooLarge, r.held+w, r.b.size)
	}
	if !r.b.sem.TryAcquire(w) {
		return fmt.Errorf("%w: %d of %d bytes in use", ErrOverBudget, r.b.used.Load(), r.b.size)
	}
	r.b.used.Add(w)
	r.held += w
	return nil
}

// Reserve takes w of the budget now, never waiting (see Grow); the gateway reserves a
// connection's or a retry buffer's cost before it is spent.
func (b *Budget) Reserve(w int64) (*Reservation, error) {
	r := &Reservation{b: b}
	if err := r.Grow(w); err != nil {
		return nil, err
	}
	return r, nil
}

// Held is the weight the reservation holds.
func (r *Reservation) Held() int64 { return r.held }

// Read reads all of rd, at most limit bytes, reserving budget for each chunk before reading
// it and never waiting for budget: a body that does not fit now fails with ErrOverBudget, one
// longer than limit with ErrTooLarge (declared, the Content-Length or -1, fails at once).
// Reserving as bytes arrive, not as declared, means a client that declares a large body and
// trickles it holds only about what it sent. On error nothing stays reserved.
func (b *Budget) Read(rd io.Reader, declared, limit int64) ([]byte, *Reservation, error) {
	if declared > limit {
		return nil, nil, fmt.Errorf("%w: declared %d bytes, limit %d", ErrTooLarge, declared, limit)
	}
	res := &Reservation{b: b}
	var buf []byte
	for {
		if int64(len(buf)) > limit {
			res.Release()
			return nil, nil, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, limit)
		}
		if len(buf) == cap(buf) {
			// Reserve the decoded weight of the next piece before growing into it. Pieces
			// double (from one chunk), so a body costs O(log n) copies and a trickle holds
			// at most twice what it sent.
			grow := max(int64(chunk), int64(len(buf)))
			if declared >= 0 {
				// Never past the declared length (+1 to see a body longer than declared),
				// but never reserved ahead of the bytes either: a client that declares
				// 4 MiB and trickles holds what it sent, not what it promised.
				grow = min(grow, max(declared+1-int64(len(buf)), 1))
			}
			grow = min(grow, limit+1-int64(len(buf)))
			w := grow * b.factor
			if !b.sem.TryAcquire(w) {
				res.Release()
				return nil, nil, fmt.Errorf("%w: %d of %d bytes in use", ErrOverBudget, b.used.Load(), b.size)
			}
			b.used.Add(w)
			res.held += w
			nb := make([]byte, len(buf), len(buf)+int(grow))
			copy(nb, buf)
			buf = nb
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > limit {
				res.Release()
				return nil, nil, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, limit)
			}
			return buf, res, nil
		}
		if err != nil {
			res.Release()
			return nil, nil, err
		}
	}
}

// What decoding costs beyond factor x the body's length, by shape: a body of many tiny objects
// or map entries costs far more per byte than one of long strings (issue 21: 4 MB of 108,925
// tiny children peaked at 662 MiB, 500k tiny attributes at 299 MiB, while 4 MB of long values
// costs about 5x). server/hooks' TestBudgetCoversEveryShape measures each shape through the
// real hooks and checks the weight covers what it allocates.
const (
	// ChildCost is charged per object at depth 4, where a hook body keeps its children and
	// related objects ({"children": {"<type>": {"<key>": {...}}}}): each is decoded into a
	// whole object, defaulted and often echoed in the answer, whatever its size. (A parent's
	// labels and annotations sit there too: a few per body.)
	ChildCost = 8 << 10
	// ObjectCost is charged per other object: a struct or a map.
	ObjectCost = 256
	// EntryCost is charged per ':' outside strings: a field or a map entry.
	EntryCost = 192
)

// ShapeWeight is what decoding body costs beyond factor x its length, from one pass over its
// bytes (strings skipped) counting objects by depth and keys. Malformed JSON is weighed as
// far as it goes; the decoder refuses it afterwards.
func ShapeWeight(body []byte) int64 {
	var w int64
	depth := 0
	inString, escaped := false, false
	for _, c := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			switch {
			case c == '[':
			case depth == 4:
				w += ChildCost
			default:
				w += ObjectCost
			}
		case '}', ']':
			depth--
		case ':':
			w += EntryCost
		}
	}
	return w
}

// Limit is the process's memory limit and where it came from: flag (when > 0), GOMEMLIMIT,
// the cgroup (v2 memory.max, v1 memory.limit_in_bytes), else FallbackLimit.
func Limit(flag int64) (int64, string) {
	if flag > 0 {
		return flag, "flag"
	}
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l, "GOMEMLIMIT"
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if l, ok := readCgroupLimit(f); ok {
			return l, "cgroup " + f
		}
	}
	return FallbackLimit, "fallback"
}

func readCgroupLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseCgroupLimit(string(b))
}

// parseCgroupLimit reads a cgroup limit file: "max" and v1's near-MaxInt64 mean none.
func parseCgroupLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}

// ForLimit sizes a hook budget from a memory limit: fraction of it (0: DefaultFraction), but
// never less than one body of maxBody bytes at factor, or no legitimate call could be served.
func ForLimit(limit int64, fraction float64, factor int, maxBody int64) *Budget {
	if fraction <= 0 || fraction > 1 {
		fraction = DefaultFraction
	}
	if factor < 1 {
		factor = DefaultFactor
	}
	size := int64(float64(limit) * fraction)
	size = max(size, (maxBody+1)*int64(factor)) // +1: Read reserves one byte past the limit
	return New(size, factor)
}
