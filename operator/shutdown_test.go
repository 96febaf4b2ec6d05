package operator_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/operator"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
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
	op, err := operator.New(operator.Config{HookAddr: "127.0.0.1:0", DiscoveryAddr: "127.0.0.1:0", DiscoveryInsecure: true,
		ShutdownGrace: time.Minute, ProviderTimeout: time.Minute,
		ExtraProviders: []providers.Entry{{Name: "block", Type: "mock", Provider: bp}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	body := `{"controller":{"metadata":{"name":"proxy-operator"}},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy",
		"metadata":{"name":"p","namespace":"ns","uid":"u1","generation":1},"spec":{"mode":"Managed","provider":"block"},"status":{}},
		"children":{},"related":{},"finalizing":false}`
	hookDone := make(chan int, 1)
	go func() {
		res, err := http.Post("http://"+op.HookAddr()+"/sync", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			hookDone <- 0
			return
		}
		res.Body.Close()
		hookDone <- res.StatusCode
	}()
	<-bp.entered
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
	_, err := operator.New(operator.Config{HookAddr: "127.0.0.1:0", DiscoveryAddr: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "-discovery-insecure") {
		t.Fatalf("New without a token: %v, want an error naming -discovery-insecure", err)
	}
}
