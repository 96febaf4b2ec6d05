package mock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newMock(t *testing.T, cfg mock.Config) (*mock.Provider, *clock) {
	t.Helper()
	c := &clock{t: t0}
	p, err := mock.New(cfg, mock.WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, c
}

func req(uid string) providers.CreateRequest {
	return providers.CreateRequest{Name: providers.InstanceName(uid, "h1"), OwnerUID: uid, SpecHash: "h1", Port: 3128}
}

func TestCreateIsIdempotentAndProvisions(t *testing.T) {
	p, c := newMock(t, mock.Config{ProvisioningDelay: mock.Duration(5 * time.Second)})
	ctx := context.Background()
	id1, err := p.Create(ctx, req("u1"))
	if err != nil {
		t.Fatal(err)
	}
	id2, err := p.Create(ctx, req("u1"))
	if err != nil || id2 != id1 {
		t.Fatalf("second create: %q %v, want %q", id2, err, id1)
	}
	if n := len(p.Instances()); n != 1 {
		t.Fatalf("%d instances after two creates, want 1", n)
	}
	got, err := p.Get(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != providers.StateProvisioning || got.IP != "" {
		t.Errorf("fresh instance %+v, want Provisioning without IP", got)
	}
	c.add(5 * time.Second)
	got, _ = p.Get(ctx, id1)
	want := providers.Instance{ID: id1, Name: providers.InstanceName("u1", "h1"), IP: mock.Address(providers.InstanceName("u1", "h1")),
		State: providers.StateRunning, OwnerUID: "u1", SpecHash: "h1", CreatedAt: t0}
	if d := cmp.Diff(want, *got); d != "" {
		t.Errorf("after the delay (-want +got):\n%s", d)
	}
	if err := p.Delete(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, id1); err != nil {
		t.Errorf("second delete: %v, want nil", err)
	}
	if _, err := p.Get(ctx, id1); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	wantCalls := []mock.Call{{Op: "create", Arg: want.Name}, {Op: "create", Arg: want.Name}, {Op: "get", Arg: id1}, {Op: "get", Arg: id1},
		{Op: "delete", Arg: id1}, {Op: "delete", Arg: id1}, {Op: "get", Arg: id1, Err: "mock get: instance not found: no instance " + id1}}
	if d := cmp.Diff(wantCalls, p.Calls()); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}

func TestAddressIsLoopbackOffDefault(t *testing.T) {
	for i := range 2000 {
		name := providers.InstanceName(fmt.Sprint("uid-", i), "h1")
		a := netip.MustParseAddr(mock.Address(name))
		if !netip.MustParsePrefix("127.0.0.0/8").Contains(a) || netip.MustParsePrefix("127.0.0.0/16").Contains(a) || a.As4()[3] == 0 || a.As4()[3] == 255 {
			t.Fatalf("Address(%s) = %s: want 127.0.0.0/8 outside 127.0.0.0/16, no .0/.255", name, a)
		}
		if mock.Address(name) != a.String() {
			t.Fatal("Address is not deterministic")
		}
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	call := func(p *mock.Provider, op string) error {
		switch op {
		case "create":
			_, err := p.Create(ctx, req("u1"))
			return err
		case "get":
			_, err := p.Get(ctx, mock.ID(providers.InstanceName("u1", "h1")))
			if errors.Is(err, providers.ErrNotFound) {
				return nil
			}
			return err
		case "delete":
			return p.Delete(ctx, "mock://x")
		default:
			_, err := p.ListByTag(ctx)
			return err
		}
	}
	kinds := map[string]error{"quota": providers.ErrQuotaExceeded, "transient": providers.ErrTransient, "permanent": providers.ErrPermanent}
	for _, op := range []string{"create", "get", "delete", "list"} {
		for kind, sentinel := range kinds {
			t.Run(op+"/"+kind, func(t *testing.T) {
				p, _ := newMock(t, mock.Config{Faults: []mock.Fault{{Op: op, Kind: kind, Count: 2}}})
				for i := range 2 {
					if err := call(p, op); !errors.Is(err, sentinel) {
						t.Fatalf("call %d: %v, want %v", i+1, err, sentinel)
					}
				}
				if err := call(p, op); err != nil {
					t.Errorf("third call: %v, want the fault used up", err)
				}
			})
		}
	}
}

func TestFaultValidation(t *testing.T) {
	tests := []struct {
		f    mock.Fault
		want string
	}{
		{mock.Fault{Op: "reboot", Kind: "quota"}, `mock faults[0]: fault op "reboot": want create, get, delete or list`},
		{mock.Fault{Op: "get", Kind: "flaky"}, `mock faults[0]: fault kind "flaky": want quota, transient or permanent`},
		{mock.Fault{Op: "get", Kind: "quota", Count: -1}, `mock faults[0]: fault count -1 must not be negative`},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			_, err := mock.New(mock.Config{Faults: []mock.Fault{tc.f}})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCanceledContextIsTransient(t *testing.T) {
	p, _ := newMock(t, mock.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Create(ctx, req("u1")); !errors.Is(err, providers.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("create with a canceled context: %v, want transient wrapping context.Canceled", err)
	}
}

func TestSeedKeepsStateAndDerivesIP(t *testing.T) {
	p, _ := newMock(t, mock.Config{})
	name := providers.InstanceName("u1", "h1")
	p.Seed(providers.Instance{ID: mock.ID(name), Name: name, State: providers.StateRunning, IP: "10.9.9.9", OwnerUID: "u1"},
		providers.Instance{ID: "mock://old", Name: "old", State: providers.StateTerminated, OwnerUID: "u2"})
	got, err := p.ListByTag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by ID.
	want := []providers.Instance{
		{ID: "mock://old", Name: "old", State: providers.StateTerminated, OwnerUID: "u2"},
		{ID: mock.ID(name), Name: name, State: providers.StateRunning, IP: mock.Address(name), OwnerUID: "u1"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("seeded instances (-want +got):\n%s", d)
	}
}

func TestCallRecordIsBounded(t *testing.T) {
	p, _ := newMock(t, mock.Config{})
	for i := range mock.MaxRecordedCalls + 10 {
		_ = p.Delete(context.Background(), fmt.Sprint("mock://", i))
	}
	calls := p.Calls()
	if len(calls) > mock.MaxRecordedCalls {
		t.Errorf("%d calls recorded, want at most %d", len(calls), mock.MaxRecordedCalls)
	}
	if last := calls[len(calls)-1].Arg; last != fmt.Sprint("mock://", mock.MaxRecordedCalls+9) {
		t.Errorf("last recorded call %s, want the latest", last)
	}
}

// TestConcurrentUse runs every method from many goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	p, c := newMock(t, mock.Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				uid := fmt.Sprint("u", (g+i)%8)
				id, err := p.Create(ctx, req(uid))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = p.Get(ctx, id)
				_, _ = p.ListByTag(ctx)
				if i%7 == 0 {
					_ = p.Delete(ctx, id)
				}
				if i%11 == 0 {
					_ = p.Inject(mock.Fault{Op: "get", Kind: "transient"})
					c.add(time.Second)
				}
				_ = p.Instances()
				_ = p.Calls()
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, in := range p.Instances() {
		if seen[in.OwnerUID] {
			t.Errorf("two instances for owner %s", in.OwnerUID)
		}
		seen[in.OwnerUID] = true
	}
}

// TestServedForwardProxy: with a server, a Running instance is a real forward proxy on its
// loopback address.
func TestServedForwardProxy(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	// A free port on 127.0.0.1 is almost surely free on the instance's 127.x.y.z too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p, c := newMock(t, mock.Config{ServeProxies: true, ProvisioningDelay: mock.Duration(time.Second)})
	r := req("u1")
	r.Port = int32(port)
	id, err := p.Create(context.Background(), r)
	if err != nil {
		t.Skipf("cannot listen on the instance's loopback address: %v", err)
	}
	c.add(time.Second)
	inst, err := p.Get(context.Background(), id)
	if err != nil || inst.IP == "" {
		t.Fatalf("instance %+v, %v: want Running with an IP", inst, err)
	}
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(inst.IP, fmt.Sprint(port))}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	res, err := client.Get(target.URL)
	if err != nil {
		t.Fatalf("GET through the mock proxy: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Errorf("status %d through the proxy, want 204", res.StatusCode)
	}
	if err := p.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", proxyURL.Host, time.Second); err == nil {
		t.Error("proxy still listening after Delete")
	}
}

// TestForwardProxyDialsFromItsOwnAddress: a site sees each mock proxy as its own client, for
// plain requests and CONNECT tunnels alike.
func TestForwardProxyDialsFromItsOwnAddress(t *testing.T) {
	seen := make(chan string, 4)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		seen <- host
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	tlsTarget := httptest.NewTLSServer(target.Config.Handler)
	t.Cleanup(tlsTarget.Close)
	for _, ip := range []string{"127.0.77.1", "127.0.77.2"} {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		addr := ln.Addr().String()
		ln.Close()
		stop, err := mock.ServeForwardProxy(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		tr := tlsTarget.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: addr})
		client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
		for _, u := range []string{target.URL, tlsTarget.URL} {
			res, err := client.Get(u)
			if err != nil {
				t.Fatalf("GET %s through %s: %v", u, addr, err)
			}
			res.Body.Close()
			if got := <-seen; got != ip {
				t.Errorf("GET %s through the proxy on %s: the site saw %s", u, ip, got)
			}
		}
		tr.CloseIdleConnections()
	}
}
