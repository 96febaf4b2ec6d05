package crawlfarm

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
)

// from returns an HTTP client whose connections come from ip, as a proxy's would.
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Retry-After")
}

func TestSiteLimitsBansAndCounts(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	cfg := Site{Name: "strict", Addr: "127.0.10.200:0", RPS: 1, Burst: 2, RetryAfter: 2 * time.Second, Tolerance: 1, Ban: 10 * time.Second, RepeatBan: 30 * time.Second}
	f, err := start([]Site{cfg}, clock.Now)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", cfg.Addr, err)
	}
	t.Cleanup(f.Close)
	url := "http://" + f.Hosts()[0] + "/page"
	a, b := from(t, "127.0.11.1"), from(t, "127.0.11.2")

	type step struct {
		c       *http.Client
		advance time.Duration
		code    int
		retry   string
	}
	steps := []step{
		{a, 0, 200, ""}, {a, 0, 200, ""}, // the burst
		{a, 0, 429, "2"},                                    // told to wait 2 s
		{b, 0, 200, ""},                                     // another IP has its own bucket
		{a, 0, 429, "2"},                                    // one request while told to wait: tolerated
		{a, 0, 403, ""},                                     // the second: banned for 10 s
		{a, 5 * time.Second, 403, ""},                       // still banned, though tokens came back
		{a, 5 * time.Second, 200, ""},                       // the ban is over
		{a, 0, 200, ""},                                     // and the bucket refilled meanwhile
		{a, 0, 429, "2"}, {a, 0, 429, "2"}, {a, 0, 403, ""}, // second ban: 30 s
		{a, 29 * time.Second, 403, ""},
		{a, time.Second, 200, ""},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		code, retry := get(t, s.c, url)
		if code != s.code || retry != s.retry {
			t.Fatalf("step %d: %d Retry-After %q, want %d %q", i, code, retry, s.code, s.retry)
		}
	}
	st := f.Stats()
	want := map[string]Counts{
		"127.0.11.1": {Served: 5, Limited: 4, Refused: 4, Bans: 2},
		"127.0.11.2": {Served: 1},
	}
	if diff := cmp.Diff(want, st.ByIP); diff != "" {
		t.Errorf("per IP (-want +got):\n%s", diff)
	}
	if got := st.Total; got != (Counts{Served: 6, Limited: 4, Refused: 4, Bans: 2}) || got.Requests() != int64(len(steps)) {
		t.Errorf("total %+v, want %d requests", got, len(steps))
	}
	if diff := cmp.Diff(want, st.Sites[0].ByIP); diff != "" || len(st.BannedNow) != 0 {
		t.Errorf("site (-want +got):\n%s banned now %v", diff, st.BannedNow)
	}
	// Ban again and check the snapshot names the IP.
	for range 3 {
		get(t, a, url)
	}
	get(t, a, url)
	if st := f.Stats(); !cmp.Equal(st.BannedNow, []string{"127.0.11.1"}) {
		t.Errorf("banned now %v, want [127.0.11.1]", st.BannedNow)
	}
}

func TestValidate(t *testing.T) {
	good := Strict("s", "127.0.10.1:0")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*Site){
		"no name":      func(s *Site) { s.Name = "" },
		"not loopback": func(s *Site) { s.Addr = "10.0.0.1:0" },
		"no port":      func(s *Site) { s.Addr = "127.0.0.1" },
		"zero rps":     func(s *Site) { s.RPS = 0 },
		"zero burst":   func(s *Site) { s.Burst = 0 },
		"short retry":  func(s *Site) { s.RetryAfter = 500 * time.Millisecond },
		"repeat < ban": func(s *Site) { s.RepeatBan = s.Ban / 2 },
	}
	for name, mut := range bad {
		s := good
		mut(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTreatment: a datacenter address gets 403 on every request whatever its rate, counted as
// refused and as a datacenter refusal; a slow address is served (late); others are untouched.
func TestTreatment(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	cfg := Lenient("site", "127.0.10.201:0")
	f, err := start([]Site{cfg}, clock.Now)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", cfg.Addr, err)
	}
	t.Cleanup(f.Close)
	f.Treat(Treatment{Datacenter: []string{"127.0.12.1"}, Slow: []string{"127.0.12.2"}, SlowDelay: 10 * time.Millisecond})
	url := "http://" + f.Hosts()[0] + "/page"
	for _, tc := range []struct {
		ip   string
		want int
	}{{"127.0.12.1", 403}, {"127.0.12.1", 403}, {"127.0.12.2", 200}, {"127.0.12.3", 200}} {
		if code, _ := get(t, from(t, tc.ip), url); code != tc.want {
			t.Errorf("from %s: %d, want %d", tc.ip, code, tc.want)
		}
	}
	if dc, d := f.Treated("127.0.12.2"); dc || d != 10*time.Millisecond {
		t.Errorf("Treated(slow) = %v, %v", dc, d)
	}
	st := f.Stats()
	if diff := cmp.Diff(Counts{Served: 2, Refused: 2, DCRefused: 2}, st.Total); diff != "" {
		t.Errorf("totals mismatch (-want +got):\n%s", diff)
	}
	if got := st.ByIP["127.0.12.1"]; got.DCRefused != 2 || got.Bans != 0 {
		t.Errorf("datacenter address counts %+v: want 2 refusals and no ban", got)
	}
}

func TestSiteRefusesFleetRanges(t *testing.T) {
	cfg := Lenient("dc-blocking", "127.0.10.201:0")
	cfg.Refuse = FleetRanges()
	f, err := Start([]Site{cfg, Lenient("open", "127.0.10.202:0")})
	if err != nil {
		t.Skipf("cannot listen: %v", err)
	}
	t.Cleanup(f.Close)
	blocking, open := "http://"+f.Hosts()[0]+"/", "http://"+f.Hosts()[1]+"/"
	for _, c := range []struct {
		ip          string
		url         string
		want        int
		description string
	}{
		{"127.1.0.1", blocking, 403, "the lowest fleet address"},
		{"127.200.3.4", blocking, 403, "a fleet address"},
		{"127.255.255.254", blocking, 403, "the highest fleet address"},
		{"127.0.200.7", blocking, 200, "a residential exit"},
		{"127.200.3.4", open, 200, "a fleet address on a site that blocks nobody"},
	} {
		if got, _ := get(t, from(t, c.ip), c.url); got != c.want {
			t.Errorf("%s (%s): got %d, want %d", c.description, c.ip, got, c.want)
		}
	}
	st := f.Stats()
	if got := st.Sites[0].DCRefused; got != 3 {
		t.Errorf("the blocking site counted %d datacenter refusals, want 3", got)
	}
}
