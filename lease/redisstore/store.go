// Package redisstore owns the Redis-backed lease.Store that any number of discovery replicas
// share: leases, cooldowns and sessions, the per attribute-set index that picks a proxy, and
// the fleet and health records the operator publishes for replicas to read. Every operation
// that decides runs as one Lua script on the Redis server, so replicas never race each other.
// It also keeps what the gateway replicas share: the pace book (pace.go) and the usage per
// team, source and period that budgets are checked against (usage.go). It knows nothing of HTTP, of how health is probed or of how the fleet view is filled.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// Defaults for Config fields left zero.
const (
	// DefaultPrefix carries a hash tag so every key lands in one slot (Redis Cluster accepts
	// the scripts; a store is one slot's worth of data either way).
	DefaultPrefix  = "{proxy-operator}:"
	DefaultTimeout = 2 * time.Second
	// DefaultWaitTimeout bounds a WAIT for replicas, well inside DefaultTimeout.
	DefaultWaitTimeout = 500 * time.Millisecond
	// sweepBatch is the prelude's SWEEP: a sweep that returns it may have left work behind.
	sweepBatch = 256
	// maxStaleRetries bounds how often an acquire re-reads the bucket list because the set of
	// attribute sets changed between the read and the script.
	maxStaleRetries = 4
	// maxDeniedRetries bounds how many denied records one acquire gives back before it
	// answers 503 (each is skipped by the next acquires at once).
	maxDeniedRetries = 8
)

// Config configures a Store.
type Config struct {
	Client redis.UniversalClient
	// Prefix starts every key (default DefaultPrefix); two stores with different prefixes
	// share one Redis without seeing each other.
	Prefix string
	// Now, when set, is the clock the scripts use (tests); nil uses the Redis server's clock,
	// the one clock every replica agrees on.
	Now func() time.Time

	// Policy is the cooldowns and bounds, as lease.Memory enforces them (lease/policy.go).
	lease.Policy

	// Admit, when set, is asked about every record before it is handed out in a lease (the
	// process's egress policy): Redis is outside input, and a record another process (or
	// whoever can write to Redis) put there with a denied endpoint is never leased. A denied
	// record is skipped by later acquires for deniedFor, counted (DeniedRecords) and logged
	// once per record.
	Admit func(fleet.Proxy) error
	// Timeout bounds every call to Redis (default DefaultTimeout): past it the call fails
	// with lease.ErrUnavailable rather than hang.
	Timeout time.Duration
	// WaitReplicas, when above 0, makes every call that changes leases or cooldowns wait
	// (Redis WAIT, on the same connection) until that many replicas hold the change, at most
	// WaitTimeout (default DefaultWaitTimeout). A change fewer replicas confirmed is answered
	// with lease.ErrUnavailable (an acquire's grant is released again), so a grant a client was
	// told about survives a Sentinel failover to any replica that confirmed it.
	WaitReplicas int
	WaitTimeout  time.Duration
	// ReapInterval paces Run's sweep (default lease.DefaultReapInterval). Every script sweeps
	// too, so Run only keeps an idle store tidy.
	ReapInterval time.Duration
	Log          *slog.Logger
}

// Store is the Redis lease.Store. Its only local state is a cache of the attribute sets (the
// buckets), checked against a version inside every acquire script.
type Store struct {
	cfg Config
	sc  scripts

	mu       chan struct{} // 1-slot lock that a context can give up on
	bver     string
	buckets  map[string]map[string]string
	bns      map[string]string // bucket -> namespace
	selCache map[string][]string

	deny denied // records Admit refused
}

var _ lease.Store = (*Store)(nil)

// New returns a store on cfg.Client. It does not contact Redis: a store made while Redis is
// down works once Redis is back.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisstore: Config.Client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.ReapInterval, lease.DefaultReapInterval)
	def(&cfg.WaitTimeout, DefaultWaitTimeout)
	if cfg.WaitReplicas < 0 {
		return nil, fmt.Errorf("redisstore: WaitReplicas %d is negative", cfg.WaitReplicas)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, sc: loadScripts(), mu: make(chan struct{}, 1)}, nil
}

func (s *Store) keys() []string { return []string{s.cfg.Prefix} }

// Prefix is the prefix every key of the store starts with.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// head is the two arguments every script starts with: now and the session idle time.
func (s *Store) head(extra int) []any {
	now := ""
	if s.cfg.Now != nil {
		now = strconv.FormatInt(s.cfg.Now().UnixMilli(), 10)
	}
	return append(make([]any, 0, 2+extra), now, ms(s.cfg.SessionIdle))
}

func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// errUnreplicated is a change the primary made that fewer than WaitReplicas replicas
// confirmed in time.
var errUnreplicated = errors.New("not confirmed by enough replicas")

// write runs a script that changes the store. With WaitReplicas the script and a WAIT go in
// one pipeline on one connection to the primary that owns the store's slot: WAIT counts the
// replicas that hold everything that connection wrote.
func (s *Store) write(ctx context.Context, sc *redis.Script, args ...any) *redis.Cmd {
	if s.cfg.WaitReplicas <= 0 {
		return sc.Run(ctx, s.cfg.Client, s.keys(), args...)
	}
	var node redis.Cmdable = s.cfg.Client
	if cc, ok := s.cfg.Client.(*redis.ClusterClient); ok {
		// A keyless WAIT in a cluster pipeline could go to any node: ask the slot's primary.
		n, err := cc.MasterForKey(ctx, s.cfg.Prefix)
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		node = n
	}
	var cmd *redis.Cmd
	var wait *redis.Cmd
	run := func(eval bool) error {
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if eval {
				cmd = sc.Eval(ctx, p, s.keys(), args...)
			} else {
				cmd = sc.EvalSha(ctx, p, s.keys(), args...)
			}
			wait = p.Do(ctx, "wait", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
			return nil
		})
		return err
	}
	err := run(false)
	if err != nil && cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		err = run(true) // the server's script cache was flushed (a restart, a failover)
	}
	if err != nil && cmd.Err() == nil {
		cmd.SetErr(err) // the WAIT itself failed: the change's fate is unknown
	}
	if n, _ := wait.Int64(); cmd.Err() == nil && n < int64(s.cfg.WaitReplicas) {
		cmd.SetErr(fmt.Errorf("%w: %d of %d replicas within %s", errUnreplicated, n, s.cfg.WaitReplicas, s.cfg.WaitTimeout))
	}
	return cmd
}

// unavailable marks what a retry may cure: the network, timeouts, and the replies of a Redis
// that is loading, read-only, failing over or out of memory. Any other error reply is a
// defect (of a script, or of the data) and is returned as it is.
func unavailable(op string, err error) error {
	if errors.Is(err, errUnreplicated) {
		return fmt.Errorf("%s: %w: %w", op, lease.ErrUnavailable, err)
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM", "NOREPLICAS"} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%s: %w: %w", op, lease.ErrUnavailable, err)
			}
		}
		return fmt.Errorf("%s: redis: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, lease.ErrUnavailable, err)
}

// Acquire implements lease.Store.
func (s *Store) Acquire(ctx context.Context, r lease.Request) (lease.Lease, error) {
	if r.TTL <= 0 {
		return lease.Lease{}, fmt.Errorf("acquire: ttl %s: %w", r.TTL, lease.ErrInvalid)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	reload := false
	stale, refused := 0, 0
	for {
		bver, ids, err := s.match(ctx, r.Selector, r.Namespaces, reload)
		if err != nil {
			return lease.Lease{}, unavailable("acquire", err)
		}
		id := newID()
		args := append(s.head(12+len(ids)), bver, id, ms(r.TTL), r.Target, r.SessionKey, s.cfg.MaxSessions, strings.Join(r.Avoid, "\n"),
			s.cfg.MaxSessionsPerNamespace, s.deny.list(time.Now()), r.Holder, s.cfg.MaxLeasesPerHolder, sharesArg(r.HolderShares))
		for _, b := range ids {
			args = append(args, b)
		}
		res, err := s.write(ctx, s.sc.acquire, args...).Slice()
		if errors.Is(err, errUnreplicated) {
			// Granted on the primary but not confirmed by the replicas: the client is told 503,
			// so the grant must not hold a slot it will never release.
			_ = s.sc.release.Run(ctx, s.cfg.Client, s.keys(), append(s.head(1), id)...).Err()
		}
		if err != nil {
			return lease.Lease{}, unavailable("acquire", err)
		}
		switch str(res, 0) {
		case "stale":
			if stale++; stale >= maxStaleRetries {
				return lease.Lease{}, fmt.Errorf("acquire: the attribute sets kept changing: %w", lease.ErrUnavailable)
			}
			reload = true
			continue
		case "nomatch":
			nm := &lease.NoMatchError{
				Matching: num(res, 1), Unhealthy: num(res, 2), AtCapacity: num(res, 3), Cooling: num(res, 4),
				LeasedForTarget: num(res, 5), Target: r.Target,
			}
			if at := str(res, 6); at != "" {
				nm.FreeAt = msTime(at)
			}
			return lease.Lease{}, nm
		case "holdercap":
			limit := s.cfg.MaxLeasesPerHolder
			for _, n := range r.HolderShares {
				if n > 0 {
					limit = min(limit, n)
				}
			}
			return lease.Lease{}, &lease.TooManyLeasesError{Holder: r.Holder, Limit: limit, FreeAt: msTime(str(res, 1))}
		case "ok":
			p, h := decode(str(res, 1), str(res, 4), str(res, 5))
			if err := s.admit(p, str(res, 4)); err != nil {
				// Never handed out: give the slot back and choose again without it.
				if err := s.write(ctx, s.sc.release, append(s.head(1), id)...).Err(); err != nil {
					return lease.Lease{}, unavailable("acquire", err)
				}
				if refused++; refused >= maxDeniedRetries {
					return lease.Lease{}, fmt.Errorf("acquire: %d records in a row denied by the egress policy: %w", refused, lease.ErrUnavailable)
				}
				continue
			}
			return lease.Lease{ID: id, Proxy: p, Health: h, Active: num(res, 2), Target: r.Target,
				SessionKey: r.SessionKey, ExpiresAt: msTime(str(res, 3))}, nil
		default:
			return lease.Lease{}, fmt.Errorf("acquire: unexpected script answer %q", str(res, 0))
		}
	}
}

// Release implements lease.Store.
func (s *Store) Release(ctx context.Context, id string) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if err := s.write(ctx, s.sc.release, append(s.head(1), id)...).Err(); err != nil {
		return unavailable("release", err)
	}
	return nil
}

// Renew implements lease.Store.
func (s *Store) Renew(ctx context.Context, id string, ttl time.Duration) (lease.Lease, error) {
	if ttl < 0 {
		return lease.Lease{}, fmt.Errorf("renew: ttl %s: %w", ttl, lease.ErrInvalid)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	res, err := s.write(ctx, s.sc.renew, append(s.head(2), id, ms(ttl))...).Slice()
	if err != nil {
		return lease.Lease{}, unavailable("renew", err)
	}
	if str(res, 0) != "ok" {
		return lease.Lease{}, fmt.Errorf("renew: %w", lease.ErrNotFound)
	}
	p, h := decode(str(res, 1), str(res, 6), str(res, 7))
	return lease.Lease{ID: id, Proxy: p, Health: h, Active: num(res, 2), Target: str(res, 4),
		SessionKey: str(res, 5), ExpiresAt: msTime(str(res, 3))}, nil
}

// Report implements lease.Store.
func (s *Store) Report(ctx context.Context, id string, r lease.Report) (lease.Cooldown, error) {
	if !r.Result.Valid() || r.Target == "" || r.RetryAfter < 0 {
		return lease.Cooldown{}, fmt.Errorf("report: result %q target %q: %w", r.Result, r.Target, lease.ErrInvalid)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(10), id, string(r.Result), r.Target, ms(r.RetryAfter),
		ms(s.cfg.RateLimitedCooldown), ms(s.cfg.BannedCooldown), ms(s.cfg.MaxCooldown),
		s.cfg.MaxCooldownsPerProxy, s.cfg.MaxCooldowns, s.cfg.MaxCooldownsPerNamespace)
	res, err := s.write(ctx, s.sc.report, args...).Slice()
	if err != nil {
		return lease.Cooldown{}, unavailable("report", err)
	}
	out := lease.Cooldown{Proxy: str(res, 1), Target: r.Target}
	switch str(res, 0) {
	case "notfound":
		return lease.Cooldown{}, fmt.Errorf("report: %w", lease.ErrNotFound)
	case "ok":
		return out, nil
	case "toomany":
		return lease.Cooldown{}, fmt.Errorf("report: %w", s.tooMany(str(res, 2), out.Proxy))
	case "cooled":
		out.Until, out.Strikes = msTime(str(res, 2)), num(res, 3)
		return out, nil
	}
	return lease.Cooldown{}, fmt.Errorf("report: unexpected script answer %q", str(res, 0))
}

// Active implements lease.Store.
func (s *Store) Active(ctx context.Context) (map[string]int, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	res, err := s.sc.active.Run(ctx, s.cfg.Client, s.keys(), append(s.head(1), "load")...).StringSlice()
	if err != nil {
		return nil, unavailable("active leases", err)
	}
	out := make(map[string]int, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		n, _ := strconv.Atoi(res[i+1])
		if n > 0 {
			out[res[i]] = n
		}
	}
	return out, nil
}

// Count implements lease.Store.
func (s *Store) Count(ctx context.Context) (int, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	n, err := s.sc.active.Run(ctx, s.cfg.Client, s.keys(), append(s.head(1), "count")...).Int()
	if err != nil {
		return 0, unavailable("active leases", err)
	}
	return n, nil
}

// ActiveCount is Count for callers that cannot handle its error: 0 while Redis is out.
func (s *Store) ActiveCount() int {
	n, _ := s.Count(context.Background())
	return n
}

// ActiveByProxy is Active for callers that cannot handle its error: empty while Redis is out.
func (s *Store) ActiveByProxy() map[string]int {
	m, err := s.Active(context.Background())
	if err != nil {
		return map[string]int{}
	}
	return m
}

var _ lease.PoolLoad = (*Store)(nil)

// PoolLoad implements lease.PoolLoad in one script: the pool's refused-lease count (kept in
// Redis, so it survives restarts and counts every replica's refusals) and each member's live
// leases and cooling targets.
func (s *Store) PoolLoad(ctx context.Context, q lease.PoolQuery) (lease.PoolView, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(1+len(q.Members)), q.Namespace+"/"+q.Pool)
	for _, m := range q.Members {
		args = append(args, m)
	}
	res, err := s.sc.poolload.Run(ctx, s.cfg.Client, s.keys(), args...).Slice()
	if err != nil {
		return lease.PoolView{}, unavailable("pool load", err)
	}
	denied, _ := strconv.ParseInt(str(res, 0), 10, 64)
	v := lease.PoolView{Active: map[string]int{}, Cooling: map[string]int{}, Denied: denied}
	for i, m := range q.Members {
		if n := num(res, 1+2*i); n > 0 {
			v.Active[m] = n
		}
		if n := num(res, 2+2*i); n > 0 {
			v.Cooling[m] = n
		}
	}
	return v, nil
}

// Cooling implements lease.Store in one script that changes nothing: each index it reads (the
// store's cooldowns by end, or each namespace's) gives at most the limit that end last.
func (s *Store) Cooling(ctx context.Context, q lease.CoolingQuery) (lease.CoolingList, error) {
	out := lease.CoolingList{Cooldowns: []lease.Cooldown{}}
	if q.Namespaces != nil && len(q.Namespaces) == 0 {
		return out, nil
	}
	limit := q.Limited()
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(1+len(q.Namespaces)), limit)
	for _, ns := range q.Namespaces {
		args = append(args, ns)
	}
	res, err := s.sc.cooling.Run(ctx, s.cfg.Client, s.keys(), args...).Slice()
	if err != nil {
		return lease.CoolingList{}, unavailable("cooling", err)
	}
	out.Total = num(res, 0)
	for i := 1; i+3 < len(res); i += 4 {
		proxy, target, _ := strings.Cut(str(res, i), "|")
		out.Cooldowns = append(out.Cooldowns, lease.Cooldown{Proxy: proxy, Target: target, Until: msTime(str(res, i+1)),
			Strikes: num(res, i+2), Reason: lease.Result(str(res, i+3))})
	}
	lease.SortCooling(out.Cooldowns)
	if len(out.Cooldowns) > limit {
		out.Cooldowns = out.Cooldowns[:limit:limit]
	}
	return out, nil
}

// Sweep expires what is due now, in batches until none is left.
func (s *Store) Sweep(ctx context.Context) error {
	for {
		cctx, cancel := s.op(ctx)
		n, err := s.sc.sweep.Run(cctx, s.cfg.Client, s.keys(), s.head(0)...).Int()
		cancel()
		if err != nil {
			return unavailable("sweep", err)
		}
		if n < sweepBatch {
			return nil
		}
	}
}

// Run implements lease.Store: it sweeps on a ticker so an idle store sheds expired leases.
// Any number of replicas may run it; a Redis outage is logged and waited out.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			err := s.Sweep(ctx)
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				s.cfg.Log.Warn("lease store unreachable", "err", err)
				failing = true
			case err == nil && failing:
				s.cfg.Log.Info("lease store reachable again")
				failing = false
			}
		}
	}
}

// match returns the bucket-set version and the ids of the buckets whose attributes contain
// sel, in one of nss (nil: any namespace), from the local cache (reloaded when asked, or
// never loaded).
func (s *Store) match(ctx context.Context, sel map[string]string, nss []string, reload bool) (string, []string, error) {
	select {
	case s.mu <- struct{}{}:
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	defer func() { <-s.mu }()
	if reload || s.buckets == nil {
		var getVer *redis.StringCmd
		var getAll, getNS *redis.MapStringStringCmd
		_, err := s.cfg.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			getVer = p.Get(ctx, s.cfg.Prefix+"bver")
			getAll = p.HGetAll(ctx, s.cfg.Prefix+"bkt")
			getNS = p.HGetAll(ctx, s.cfg.Prefix+"bns")
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", nil, err
		}
		ver, err := getVer.Result()
		if errors.Is(err, redis.Nil) {
			ver = "0"
		} else if err != nil {
			return "", nil, err
		}
		buckets := map[string]map[string]string{}
		for id, js := range getAll.Val() {
			var attrs map[string]string
			if err := json.Unmarshal([]byte(js), &attrs); err != nil {
				s.cfg.Log.Error("unreadable attribute set in the lease store", "bucket", id, "err", err)
				continue
			}
			buckets[id] = attrs
		}
		s.bver, s.buckets, s.bns, s.selCache = ver, buckets, getNS.Val(), map[string][]string{}
	}
	k := selKey(sel, nss)
	if ids, ok := s.selCache[k]; ok {
		return s.bver, ids, nil
	}
	ids := []string{}
	for id, attrs := range s.buckets {
		if fleet.Matches(attrs, sel) && (nss == nil || slices.Contains(nss, s.bns[id])) {
			ids = append(ids, id)
		}
	}
	if len(s.selCache) >= 1024 { // a flood of distinct selectors costs a rescan, not memory
		clear(s.selCache)
	}
	s.selCache[k] = ids
	return s.bver, ids, nil
}

func selKey(sel map[string]string, nss []string) string {
	b, _ := json.Marshal(sel) // map keys are sorted: a canonical form
	if nss == nil {
		return string(b)
	}
	n, _ := json.Marshal(nss)
	return string(b) + "\x00" + string(n)
}

// decode reads the published records a script handed back; a record the store cannot read
// still names the proxy, so a lease is never refused over it.
func decode(key, pj, hj string) (fleet.Proxy, verdict.Health) {
	p, err := decodeProxy([]byte(pj))
	if pj == "" || err != nil {
		p = fleet.Proxy{Key: key}
	}
	var h verdict.Health
	if hj != "" {
		_ = json.Unmarshal([]byte(hj), &h)
	}
	return p, h
}

func str(res []any, i int) string {
	if i >= len(res) {
		return ""
	}
	switch v := res[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func num(res []any, i int) int {
	n, _ := strconv.Atoi(str(res, i))
	return n
}

func msTime(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(n)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// sharesArg is a request's HolderShares as the acquire script reads them: "ns=n" lines, in
// namespace order (deterministic arguments).
func sharesArg(shares map[string]int) string {
	if len(shares) == 0 {
		return ""
	}
	nss := make([]string, 0, len(shares))
	for ns := range shares {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	var b strings.Builder
	for _, ns := range nss {
		fmt.Fprintf(&b, "%s=%d\n", ns, shares[ns])
	}
	return b.String()
}
