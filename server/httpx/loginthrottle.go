package httpx

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Defaults of a LoginThrottle's zero fields (decision 0257).
const (
	DefaultLoginFree     = 10
	DefaultLoginBackoff  = time.Second
	DefaultLoginMaxWait  = 5 * time.Minute
	DefaultLoginForget   = 15 * time.Minute
	DefaultLoginMaxAddrs = 16384
	// DefaultLoginLogBurst lines are logged at once, then one per DefaultLoginLogEvery.
	DefaultLoginLogBurst = 5
	DefaultLoginLogEvery = time.Second
)

// LoginThrottle slows down guessing a credential, per source address: after Free failed
// logins from one address, each further failure doubles how long every request from that
// address is refused (Wait), from Backoff up to MaxWait; an address with no failure for Forget
// starts over. IPv6 addresses count per /64 (one host holds a whole /64). The table holds at
// most MaxAddrs addresses: a new one past the bound takes the place of the stalest of a few
// sampled, so an attacker with many addresses costs bounded memory (and at worst forgets some
// of its own failures). Failed also logs, at most LogBurst lines at once and one per LogEvery
// after, each naming the source address and how many lines were left out since the last.
// The zero value is ready; a nil *LoginThrottle never throttles and never logs.
type LoginThrottle struct {
	// Listener names the surface in log lines (hooks, discovery, gateway); Message is the log
	// line's message (empty: "login failed").
	Listener string
	Message  string
	Log      *slog.Logger
	Now      func() time.Time

	Free     int
	Backoff  time.Duration
	MaxWait  time.Duration
	Forget   time.Duration
	MaxAddrs int
	LogBurst int
	LogEvery time.Duration

	once sync.Once
	mu   sync.Mutex
	m    map[netip.Prefix]*loginEntry
	// The log's token bucket: tokens left, when it was last filled, lines left out since the
	// last line.
	logTokens  float64
	logFilled  time.Time
	suppressed int
}

type loginEntry struct {
	fails int
	last  time.Time
	until time.Time
}

func (t *LoginThrottle) init() {
	if t.Log == nil {
		t.Log = slog.New(slog.DiscardHandler)
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Free <= 0 {
		t.Free = DefaultLoginFree
	}
	if t.Backoff <= 0 {
		t.Backoff = DefaultLoginBackoff
	}
	if t.MaxWait <= 0 {
		t.MaxWait = DefaultLoginMaxWait
	}
	if t.Forget <= 0 {
		t.Forget = DefaultLoginForget
	}
	if t.MaxAddrs <= 0 {
		t.MaxAddrs = DefaultLoginMaxAddrs
	}
	if t.LogBurst <= 0 {
		t.LogBurst = DefaultLoginLogBurst
	}
	if t.Message == "" {
		t.Message = "login failed"
	}
	if t.LogEvery <= 0 {
		t.LogEvery = DefaultLoginLogEvery
	}
	t.m = map[netip.Prefix]*loginEntry{}
	t.logTokens = float64(t.LogBurst)
}

// sourceOf is the key of a remote address: the IPv4 address, or the IPv6 /64. An address that
// does not parse (a test's pipe) is one key of its own.
func sourceOf(remote string) netip.Prefix {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// Wait is how long requests from r's source address are refused now (0: not refused). A
// refused request should be answered 429 with Retry-After, without looking at its credential,
// so a guesser learns nothing while it waits.
func (t *LoginThrottle) Wait(r *http.Request) time.Duration { return t.WaitAddr(r.RemoteAddr) }

// WaitAddr is Wait for a connection that is no HTTP request (the gateway's SOCKS5 listener),
// by its remote address.
func (t *LoginThrottle) WaitAddr(remote string) time.Duration {
	if t == nil {
		return 0
	}
	t.once.Do(t.init)
	key := sourceOf(remote)
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[key]
	if e == nil {
		return 0
	}
	return max(0, e.until.Sub(t.Now()))
}

// RetryAfter is Wait in whole seconds, rounded up, for the Retry-After header.
func RetryAfter(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// Failed records a failed login from r's source address and logs it (sampled) with reason.
func (t *LoginThrottle) Failed(r *http.Request, reason string) {
	t.FailedAddr(r.RemoteAddr, reason, "method", r.Method, "path", r.URL.Path)
}

// FailedAddr is Failed for a connection that is no HTTP request, by its remote address; attrs
// say what it asked for in the log line.
func (t *LoginThrottle) FailedAddr(remote, reason string, attrs ...any) {
	if t == nil {
		return
	}
	t.once.Do(t.init)
	key := sourceOf(remote)
	now := t.Now()
	t.mu.Lock()
	e := t.m[key]
	if e == nil {
		if len(t.m) >= t.MaxAddrs {
			t.evictLocked(now)
		}
		e = &loginEntry{}
		t.m[key] = e
	}
	if now.Sub(e.last) > t.Forget {
		e.fails = 0
	}
	e.fails++
	e.last = now
	if over := e.fails - t.Free; over > 0 {
		wait := t.MaxWait
		if over < 30 {
			wait = min(t.Backoff<<(over-1), t.MaxWait)
		}
		e.until = now.Add(wait)
	}
	fails := e.fails
	log, suppressed := t.sampleLocked(now)
	t.mu.Unlock()
	if log {
		t.Log.Warn(t.Message, append([]any{"listener", t.Listener, "reason", reason, "remote", remote},
			append(attrs, "failures", fails, "suppressed", suppressed)...)...)
	}
}

// evictLocked drops the stalest of a few entries (map order is random): O(1) per new address
// however full the table.
func (t *LoginThrottle) evictLocked(now time.Time) {
	var victim netip.Prefix
	var oldest time.Time
	n := 0
	for k, e := range t.m {
		if n == 0 || e.last.Before(oldest) {
			victim, oldest = k, e.last
		}
		if n++; n == 8 || now.Sub(e.last) > t.Forget {
			break
		}
	}
	delete(t.m, victim)
}

// sampleLocked takes a token from the log's bucket: whether to log, and how many lines were
// left out since the last one logged.
func (t *LoginThrottle) sampleLocked(now time.Time) (bool, int) {
	if !t.logFilled.IsZero() {
		t.logTokens = min(float64(t.LogBurst), t.logTokens+float64(now.Sub(t.logFilled))/float64(t.LogEvery))
	}
	t.logFilled = now
	if t.logTokens < 1 {
		t.suppressed++
		return false, 0
	}
	t.logTokens--
	s := t.suppressed
	t.suppressed = 0
	return true, s
}

// Addresses is the number of source addresses in the table now.
func (t *LoginThrottle) Addresses() int {
	if t == nil {
		return 0
	}
	t.once.Do(t.init)
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// WriteThrottled answers a request Wait refused: 429 with Retry-After, the connection's last
// answer (CloseAfterAnswer) so the server does not first read what is left of the body.
func WriteThrottled(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	CloseAfterAnswer(w, r)
	WriteError(w, &Error{Code: http.StatusTooManyRequests, RetryAfter: RetryAfter(wait),
		Message: "too many failed logins from this address; retry after the Retry-After seconds"})
}
