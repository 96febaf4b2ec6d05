package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	op "github.com/proxy-operator/proxy-operator/server"
)

// redisFleet is External Proxies in front of loopback stubs, synced through the hooks the way
// Metacontroller would (each keeps the status its last sync answered).
type redisFleet struct {
	names  []string
	specs  map[string]string
	status map[string]json.RawMessage
}

func newRedisFleet(t *testing.T, n, maxLeases int) *redisFleet {
	t.Helper()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(target.Close)
	f := &redisFleet{specs: map[string]string{}, status: map[string]json.RawMessage{}}
	for i := range n {
		stub := newStubProxy(t)
		name := fmt.Sprintf("ext-%02d", i)
		f.names = append(f.names, name)
		f.specs[name] = fmt.Sprintf(`{"mode":"External","endpoint":{"host":"127.0.0.1","port":%d},"attributes":{"geo":"eu"},"maxLeases":%d,`+
			`"healthCheck":{"probeURL":%q,"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":1,"successThreshold":1}}`,
			stub.port(), maxLeases, target.URL+"/generate_204")
	}
	return f
}

// syncAll posts one sync per Proxy and keeps each answered status.
func (f *redisFleet) syncAll(t *testing.T, hookURL string) {
	t.Helper()
	for _, name := range f.names {
		status := f.status[name]
		if status == nil {
			status = json.RawMessage(`{}`)
		}
		body := fmt.Sprintf(`{"controller":{},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy",`+
			`"metadata":{"name":%q,"namespace":"crawl","uid":"uid-%s","generation":1},"spec":%s,"status":%s},"children":{},"related":{},"finalizing":false}`,
			name, name, f.specs[name], status)
		code, b := httpCall(t, http.MethodPost, hookURL+"/sync", "", body)
		if code != http.StatusOK {
			t.Fatalf("sync %s: %d %s", name, code, b)
		}
		var resp struct {
			Status json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatal(err)
		}
		f.status[name] = resp.Status
	}
}

// untilHealthy syncs until discovery (which reads Redis) lists every Proxy healthy.
func (f *redisFleet) untilHealthy(t *testing.T, hookURL, discURL string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		f.syncAll(t, hookURL)
		code, b := httpCall(t, http.MethodGet, discURL+"/v1/proxies?healthy=true", "", "")
		var list struct {
			Complete bool `json:"complete"`
			Count    int  `json:"count"`
		}
		_ = json.Unmarshal(b, &list)
		if code == http.StatusOK && list.Complete && list.Count == len(f.names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery lists %d of %d proxies healthy after 60 s (last answer %d %s)", list.Count, len(f.names), code, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var redisHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}

// httpCall makes one request; a transport error is -1 (never a hang: the client has a timeout).
func httpCall(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := redisHTTP.Do(req)
	if err != nil {
		return -1, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

type redisLease struct {
	LeaseID string `json:"leaseID"`
	Proxy   struct {
		ID           string `json:"id"`
		ActiveLeases int    `json:"activeLeases"`
		MaxLeases    int    `json:"maxLeases"`
	} `json:"proxy"`
}

// operatorProcess is the real binary, started with -lease-store and stopped with SIGKILL.
type operatorProcess struct {
	cmd              *exec.Cmd
	hookURL, discURL string
	out              *bytes.Buffer
	outMu            *sync.Mutex
	exited           chan struct{}
}

func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "proxy-operator")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startOperator runs the binary on loopback: discovery without a token (-discovery-insecure) and
// External stubs on 127.0.0.1 (-allow-loopback-proxies), as the egress policy otherwise refuses both.
func startOperator(t *testing.T, bin string, args ...string) *operatorProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-hook-addr", "127.0.0.1:0", "-discovery-addr", "127.0.0.1:0",
		"-log-format", "json", "-gc-interval", "0", "-discovery-insecure", "-hooks-insecure", "-allow-loopback-proxies"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProcess{cmd: cmd, out: &bytes.Buffer{}, outMu: &sync.Mutex{}, exited: make(chan struct{})}
	listening := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.outMu.Lock()
			p.out.Write(line)
			p.out.WriteByte('\n')
			p.outMu.Unlock()
			var rec struct {
				Msg       string `json:"msg"`
				Hooks     string `json:"hooks"`
				Discovery string `json:"discovery"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" && rec.Hooks != "" {
				listening <- [2]string{rec.Hooks, rec.Discovery}
			}
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	select {
	case addrs := <-listening:
		p.hookURL, p.discURL = "http://"+addrs[0], "http://"+addrs[1]
	case <-p.exited:
		t.Fatalf("operator exited before listening:\n%s", p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("operator not listening after 60 s:\n%s", p.output())
	}
	return p
}

func (p *operatorProcess) output() string {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	return p.out.String()
}

// kill is SIGKILL: no shutdown, nothing flushed, as an OOM kill or a node loss.
func (p *operatorProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// TestRedisOperatorRestart: grant a lease (with a session), report a ban for its target, kill
// the operator process, start it again with a 10-minute warm-up: the lease renews, the cooldown
// still excludes its proxy for the target, the session is still sticky, leasing answers at
// once, and the Redis password never appears in the log.
func TestRedisOperatorRestart(t *testing.T) {
	const password = "s3cret-redis-pw"
	srv := redistest.Start(t, "--requirepass", password)
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildOperator(t)
	// The URL carries a wrong password that the file overrides: neither may be logged.
	storeArgs := []string{"-lease-store", "redis://:wrong-url-pw@" + srv.Addr + "/0", "-lease-store-password-file", pwFile}

	fleet := newRedisFleet(t, 3, 4)
	first := startOperator(t, bin, append(storeArgs, "-fleet-warmup", "1s")...)
	fleet.untilHealthy(t, first.hookURL, first.discURL)

	code, b := httpCall(t, http.MethodPost, first.discURL+"/v1/leases", "", `{"ttlSeconds":600,"target":"t.example","sessionKey":"s1"}`)
	var granted redisLease
	if code != http.StatusOK || json.Unmarshal(b, &granted) != nil {
		t.Fatalf("lease: %d %s", code, b)
	}
	if code, b := httpCall(t, http.MethodPost, first.discURL+"/v1/leases/"+granted.LeaseID+"/report", "", `{"result":"banned","target":"t.example"}`); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, b)
	}
	first.kill()

	// A warm-up far longer than the test: leasing must not wait for it.
	second := startOperator(t, bin, append(storeArgs, "-fleet-warmup", "10m")...)
	started := time.Now()
	if code, b := httpCall(t, http.MethodPost, second.discURL+"/v1/leases/"+granted.LeaseID+"/renew", "", `{}`); code != http.StatusOK {
		t.Errorf("renew after the restart: %d %s", code, b)
	}
	code, b = httpCall(t, http.MethodPost, second.discURL+"/v1/leases", "", `{"ttlSeconds":60,"sessionKey":"s1"}`)
	var sticky redisLease
	if code != http.StatusOK || json.Unmarshal(b, &sticky) != nil || sticky.Proxy.ID != granted.Proxy.ID {
		t.Errorf("session lease after the restart: %d %s, want %s", code, b, granted.Proxy.ID)
	}
	for range 4 { // every lease for the banned target avoids the cooled proxy
		code, b = httpCall(t, http.MethodPost, second.discURL+"/v1/leases", "", `{"ttlSeconds":60,"target":"t.example"}`)
		var other redisLease
		if code != http.StatusOK || json.Unmarshal(b, &other) != nil || other.Proxy.ID == granted.Proxy.ID {
			t.Errorf("lease for the banned target after the restart: %d %s, want a proxy other than %s", code, b, granted.Proxy.ID)
			continue
		}
		// Released at once: one holder per (proxy, target) would otherwise use up the others.
		if code, b := httpCall(t, http.MethodDelete, second.discURL+"/v1/leases/"+other.LeaseID, "", ""); code != http.StatusNoContent {
			t.Errorf("release: %d %s", code, b)
		}
	}
	code, b = httpCall(t, http.MethodGet, second.discURL+"/v1/proxies", "", "")
	if code != http.StatusOK || !bytes.Contains(b, []byte(`"complete":true`)) {
		t.Errorf("list after the restart: %d %s, want complete", code, b)
	}
	t.Logf("after the restart: renew, sticky session, cooldown and list answered within %s of the process listening (warm-up 10m)", time.Since(started).Round(time.Millisecond))
	// The hooks work as before.
	fleet.syncAll(t, second.hookURL)

	for _, p := range []*operatorProcess{first, second} {
		if out := p.output(); strings.Contains(out, password) || strings.Contains(out, "wrong-url-pw") {
			t.Errorf("the operator logged a Redis password:\n%s", out)
		}
	}
	if !strings.Contains(second.output(), `"url":"redis://:xxxxx@`+srv.Addr) {
		t.Errorf("the operator did not log the redacted store URL:\n%s", second.output())
	}
}

// TestRedisOutageUnderLoad: 64 clients lease, report and release through two discovery
// servers (the operator's and a discovery-only one) on one Redis; Redis is killed and
// restarted from its append-only file mid-run. While it is down every answer is a 503 with
// Retry-After, never a 500 or a hang; the hooks keep answering; no grant passes a proxy's cap;
// and leasing comes back by itself. The time from Redis being ready again to each server's
// first decided lease answer (a grant or a 409) is logged, not asserted.
func TestRedisOutageUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	const maxLeases = 3
	fleet := newRedisFleet(t, 8, maxLeases)
	rig := startRedisRig(t, fleet, op.LeaseConfig{Store: "redis://" + srv.Addr}, 1)
	discURLs := rig.discURLs
	var (
		log      answerLog
		mu       sync.Mutex
		live     = map[string]int{}
		breaks   []string
		stopLoad atomic.Bool
	)
	var load sync.WaitGroup
	for c := range 64 {
		load.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for !stopLoad.Load() {
				server := rng.IntN(len(discURLs))
				base := discURLs[server]
				code, b := log.call(server, "lease", http.MethodPost, base+"/v1/leases", fmt.Sprintf(`{"ttlSeconds":30,"target":"t%d.example"}`, rng.IntN(4)))
				if code != http.StatusOK {
					if code == http.StatusServiceUnavailable || code == http.StatusConflict {
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				var l redisLease
				if err := json.Unmarshal(b, &l); err != nil {
					mu.Lock()
					breaks = append(breaks, fmt.Sprintf("lease answer %s: %v", b, err))
					mu.Unlock()
					continue
				}
				mu.Lock()
				live[l.Proxy.ID]++
				if l.Proxy.ActiveLeases > maxLeases || live[l.Proxy.ID] > maxLeases {
					breaks = append(breaks, fmt.Sprintf("%s: %d active by the answer, %d live by the test, cap %d", l.Proxy.ID, l.Proxy.ActiveLeases, live[l.Proxy.ID], maxLeases))
				}
				mu.Unlock()
				if rng.IntN(8) == 0 {
					log.call(server, "report", http.MethodPost, base+"/v1/leases/"+l.LeaseID+"/report", `{"result":"rate_limited","target":"t0.example"}`)
				}
				// Out of the test's count before the release: never count a lease the store may
				// have freed. A release lost to the outage leaves the lease to its TTL.
				mu.Lock()
				live[l.Proxy.ID]--
				mu.Unlock()
				// As a crawler would: retry a release the outage refused, so the slot frees
				// once Redis is back rather than at the lease's TTL.
				for !stopLoad.Load() {
					if code, _ := log.call(server, "release", http.MethodDelete, base+"/v1/leases/"+l.LeaseID, ""); code != http.StatusServiceUnavailable {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	log.decided(len(discURLs), time.Now()) // load running on both servers

	srv.Kill()
	downFrom := time.Now()
	// The hooks keep working while Redis is down.
	fleet.syncAll(t, rig.hookURL)
	if code, b := httpCall(t, http.MethodGet, rig.hookURL+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("readyz with Redis down: %d %s", code, b)
	}
	time.Sleep(2 * time.Second) // an outage long enough for every client to meet it
	downTo := time.Now()
	srv.Restart()
	back := time.Now()
	first := log.decided(len(discURLs), back)
	time.Sleep(time.Second) // load after the recovery too
	stopLoad.Store(true)
	load.Wait()

	for _, b := range breaks {
		t.Error(b)
	}
	total, during, codes := log.check(t, func(code int) bool { return code != -1 && (code < 500 || code == http.StatusServiceUnavailable) }, downFrom, downTo)
	if during == 0 {
		t.Errorf("no request was answered while Redis was down: the outage was not exercised")
	}
	for server := range discURLs {
		f, ok := first[server]
		if !ok {
			t.Errorf("server %d decided no lease request within 60 s of Redis being back", server)
			continue
		}
		t.Logf("server %d: first decided lease answer (200 or 409) %s after Redis was ready again", server, f.Sub(back).Round(time.Millisecond))
	}
	t.Logf("%d answers (%d while Redis was down, all 503), by operation and code: %v", total, during, codes)
}
