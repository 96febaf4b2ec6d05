package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
)

// blockingCreate holds every Create until release is closed.
type blockingCreate struct {
	providers.Provider
	entered chan struct{}
	release chan struct{}
}

func (b *blockingCreate) Create(ctx context.Context, req providers.CreateRequest) (string, error) {
	close(b.entered)
	<-b.release
	return b.Provider.Create(ctx, req)
}

// TestShutdownStopsBothServersTogether is issue 10, item 11: discovery kept granting leases
// while the hooks drained. With a hook call held in flight, discovery must stop serving
// as soon as shutdown starts, not after the hooks finish.
func TestShutdownStopsBothServersTogether(t *testing.T) {
	mp, err := mock.New(mock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bp := &blockingCreate{Provider: mp, entered: make(chan struct{}), release: make(chan struct{})}
	op, err := server.New(server.Config{
		Hooks:         server.HooksConfig{Addr: "127.0.0.1:0", ProviderTimeout: time.Minute},
		Discovery:     server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Providers:     server.ProvidersConfig{Extra: []providers.Entry{{Name: "block", Type: "mock", Provider: bp}}},
		ShutdownGrace: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	body := `{"controller":{"metadata":{"name":"proxy-operator"}},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy",
		"metadata":{"name":"p","namespace":"ns","uid":"u1","generation":1},"spec":{"mode":"Managed","provider":"block"},"status":{}},
		"children":{},"related":{},"finalizing":false}`
	// The first sync only asks for the credentials Secret (no machine before it is stored);
	// feed it back as Metacontroller would, so the second sync reaches the held Create.
	res, err := http.Post("http://"+op.HookAddr()+"/sync", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		Children []map[string]any `json:"children"`
	}
	err = json.NewDecoder(res.Body).Decode(&first)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || len(first.Children) == 0 {
		t.Fatalf("first sync: %d, %v, children %v", res.StatusCode, err, first.Children)
	}
	observed := map[string]map[string]any{}
	for _, c := range first.Children {
		meta, _ := c["metadata"].(map[string]any)
		typ := fmt.Sprint(c["kind"]) + "." + fmt.Sprint(c["apiVersion"])
		if observed[typ] == nil {
			observed[typ] = map[string]any{}
		}
		observed[typ][fmt.Sprint(meta["namespace"])+"/"+fmt.Sprint(meta["name"])] = c
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	req["children"] = observed
	second, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hookDone := make(chan int, 1)
	go func() {
		res, err := http.Post("http://"+op.HookAddr()+"/sync", "application/json", bytes.NewReader(second))
		if err != nil {
			hookDone <- 0
			return
		}
		res.Body.Close()
		hookDone <- res.StatusCode
	}()
	select {
	case <-bp.entered:
	case <-time.After(time.Minute):
		t.Fatal("the sync never reached the provider's Create")
	}
	if code, _ := get(t, "http://"+op.DiscoveryAddr()+"/v1/proxies"); code != http.StatusOK {
		t.Fatalf("discovery before shutdown: %d", code)
	}
	cancel()
	// The bound only ends a failing test: with both servers stopping together, discovery
	// refuses connections at once while the hook call is still held.
	deadline := time.Now().Add(20 * time.Second)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		res, err := client.Get("http://" + op.DiscoveryAddr() + "/v1/proxies")
		if err != nil {
			break
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("discovery still serving while the hooks drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case code := <-hookDone:
		t.Fatalf("the held hook call ended (%d) before discovery stopped: the test proves nothing", code)
	default:
	}
	close(bp.release)
	if code := <-hookDone; code != http.StatusOK {
		t.Errorf("the in-flight hook call: %d, want 200 (drained, not cut)", code)
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

// TestNewRefusesWithoutToken: the default configuration does not serve discovery without a
// token (issue 10, item 5).
func TestNewRefusesWithoutToken(t *testing.T) {
	_, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0"}})
	if err == nil || !strings.Contains(err.Error(), "-discovery-insecure") {
		t.Fatalf("New without a token: %v, want an error naming -discovery-insecure", err)
	}
}
