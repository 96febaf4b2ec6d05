package sim_test

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// TestTLSWithToken plays Metacontroller against the real hook server serving TLS with a token,
// as the shipped install runs it: the driver trusts only the CA from ca.crt, checks the
// certificate for the hook Service's name, and sends "Bearer <trimmed token Secret value>". A
// Proxy reaches Ready and is finalized. A driver holding another token gets 401 on every call:
// the parent never syncs, each failure is a SyncError, and nothing is provisioned.
func TestTLSWithToken(t *testing.T) {
	const service = "proxy-operator-hooks.proxy-operator.svc"
	caPEM, certPEM, keyPEM, err := hookauth.Generate(hookauth.DNSNames("proxy-operator-hooks", "proxy-operator"), start)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := hookauthCredentials(certPEM, keyPEM, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	clock := driver.NewClock(start)
	mp, err := mock.New(mock.Config{}, mock.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	health, view := &fakeHealth{}, fleet.New(clock.Now, time.Minute)
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp}),
		Fleet:     view, Health: health, Now: clock.Now,
		Token: creds.Token, TLS: creds.TLSConfig(),
	}
	srv := h.Server()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	url := "https://" + ln.Addr().String()

	// The Secret's value as the operator writes it, with the newline a hand-made one may carry.
	d := &driver.Driver{URL: url, Clock: clock, ResyncPeriod: 120 * time.Second, Refinalize: true,
		Endpoint: &driver.Endpoint{CABundle: caPEM, AuthHeader: driver.AuthHeader("", []byte(creds.Token+"\n")), ServerName: service}}
	e := &env{d: d, mock: mp, health: health, fleet: view}
	p := managed("edge-tls", "local-a")
	e.mustReady(t, p)
	if err := d.Delete(p.Key()); err != nil {
		t.Fatal(err)
	}
	if err := d.RunUntil(func() bool { return !d.Exists(p.Key()) }, 5*time.Minute); err != nil {
		t.Fatalf("not finalized over TLS: %v; events %v", err, d.Events())
	}

	forged := &driver.Driver{URL: url, Clock: driver.NewClock(start), ResyncPeriod: 120 * time.Second,
		Endpoint: &driver.Endpoint{CABundle: caPEM, AuthHeader: driver.AuthHeader("Bearer", []byte("stolen-nothing-0123456789abcdef")), ServerName: service}}
	q := managed("edge-forged", "local-a")
	health.set(q.Key(), verdict.Healthy, start)
	if err := forged.Apply(q); err != nil {
		t.Fatal(err)
	}
	if err := forged.RunFor(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _ := forged.Status(q.Key()); st.Phase != "" {
		t.Errorf("a parent synced with another token has phase %q, want none", st.Phase)
	}
	evs := forged.Events()
	if len(evs) == 0 || evs[0].Reason != "SyncError" || !strings.Contains(evs[0].Message, "401") {
		t.Errorf("events %v, want SyncErrors naming 401", evs)
	}
	if insts := mp.Instances(); len(insts) != 0 {
		t.Errorf("mock instances after forged calls: %+v, want none", insts)
	}

	// A driver that does not trust the CA (Metacontroller without caBundle) cannot call at all.
	untrusting := &driver.Driver{URL: url, Clock: driver.NewClock(start), Endpoint: &driver.Endpoint{AuthHeader: driver.AuthHeader("", []byte(creds.Token)), ServerName: service}}
	if err := untrusting.Apply(managed("edge-untrusted", "local-a")); err != nil {
		t.Fatal(err)
	}
	if err := untrusting.RunFor(time.Minute); err != nil {
		t.Fatal(err)
	}
	if evs := untrusting.Events(); len(evs) == 0 || !strings.Contains(evs[0].Message, "certificate") {
		t.Errorf("events %v, want a certificate error", evs)
	}
}

// hookauthCredentials assembles what the operator serves with from the generated PEM.
func hookauthCredentials(certPEM, keyPEM, caPEM []byte) (*hookauth.Credentials, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &hookauth.Credentials{Cert: cert, CA: caPEM, Token: "hook-token-0123456789abcdefghij"}, nil
}
