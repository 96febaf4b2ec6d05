package mock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// collidingUIDs finds two owner UIDs whose instances' first addresses are the same, as two of
// 10,000 Proxies almost surely are (the birthday bound over the loopback range).
func collidingUIDs(t *testing.T) (string, string) {
	t.Helper()
	seen := map[string]string{}
	for i := range 200000 {
		uid := fmt.Sprint("uid-", i)
		a := mock.Address(req(uid).Name)
		if other, ok := seen[a]; ok {
			return other, uid
		}
		seen[a] = uid
	}
	t.Fatal("no two names share a first address in 200,000")
	return "", ""
}

// TestCollidingNamesGetDistinctAddresses: two instances whose names hash to the same address
// both run, each on an address of its own, the first on its first candidate and the second on
// its next one; once the first is deleted its address is free again.
func TestCollidingNamesGetDistinctAddresses(t *testing.T) {
	a, b := collidingUIDs(t)
	p, c := newMock(t, mock.Config{ProvisioningDelay: mock.Duration(time.Second)})
	ctx := context.Background()
	idA, err := p.Create(ctx, req(a))
	if err != nil {
		t.Fatal(err)
	}
	idB, err := p.Create(ctx, req(b))
	if err != nil {
		t.Fatal(err)
	}
	c.add(time.Second)
	ia, _ := p.Get(ctx, idA)
	ib, _ := p.Get(ctx, idB)
	if want := mock.Address(req(a).Name); ia.IP != want {
		t.Errorf("first instance on %s, want its first candidate %s", ia.IP, want)
	}
	if want := mock.AddressCandidate(req(b).Name, 1); ib.IP != want {
		t.Errorf("second instance on %s, want its second candidate %s", ib.IP, want)
	}
	if ia.IP == ib.IP {
		t.Fatalf("both instances on %s", ia.IP)
	}
	if err := p.Delete(ctx, idA); err != nil {
		t.Fatal(err)
	}
	p2, c2 := newMock(t, mock.Config{ProvisioningDelay: mock.Duration(time.Second)})
	for _, uid := range []string{b, a} { // the other order: b now takes the shared address
		if _, err := p2.Create(ctx, req(uid)); err != nil {
			t.Fatal(err)
		}
	}
	c2.add(time.Second)
	ib2, _ := p2.Get(ctx, idB)
	if ib2.IP != mock.Address(req(b).Name) {
		t.Errorf("created first, the second name took %s, want its first candidate", ib2.IP)
	}
}

// TestAddressInUseOutsideTakesTheNext: an address something else listens on (here this test)
// is skipped for the next candidate, with a real forward proxy on it.
func TestAddressInUseOutsideTakesTheNext(t *testing.T) {
	r := req("busy")
	ln, err := net.Listen("tcp", net.JoinHostPort(mock.Address(r.Name), "0"))
	if err != nil {
		t.Skipf("cannot listen on the loopback range here: %v", err)
	}
	defer ln.Close()
	r.Port = int32(ln.Addr().(*net.TCPAddr).Port)
	p, c := newMock(t, mock.Config{ServeProxies: true, ProvisioningDelay: mock.Duration(time.Second)})
	id, err := p.Create(context.Background(), r)
	if err != nil {
		t.Fatalf("create with its first address taken: %v", err)
	}
	c.add(time.Second)
	inst, _ := p.Get(context.Background(), id)
	if want := mock.AddressCandidate(r.Name, 1); inst.IP != want {
		t.Fatalf("instance on %s, want the next candidate %s", inst.IP, want)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(inst.IP, fmt.Sprint(r.Port)), 5*time.Second)
	if err != nil {
		t.Fatalf("the instance's forward proxy does not listen: %v", err)
	}
	conn.Close()
}

// TestListenErrorClasses: an error retrying cannot heal is permanent, not transient; running
// out of descriptors is transient; no free address among the candidates is a quota error.
func TestListenErrorClasses(t *testing.T) {
	listenErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	tests := []struct {
		name  string
		errno syscall.Errno
		want  error
		tries int
	}{
		{"address not available", syscall.EADDRNOTAVAIL, providers.ErrPermanent, 1},
		{"permission denied", syscall.EACCES, providers.ErrPermanent, 1},
		{"too many open files", syscall.EMFILE, providers.ErrTransient, 1},
		{"every candidate in use", syscall.EADDRINUSE, providers.ErrQuotaExceeded, mock.MaxAddressCandidates},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tried := map[string]bool{}
			p, err := mock.New(mock.Config{}, mock.WithServer(func(addr string, _ *providers.Credentials) (func(), error) {
				tried[addr] = true
				return nil, listenErr(tc.errno)
			}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(context.Background(), req("u1"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("create: %v, want %v", err, tc.want)
			}
			if tc.want != providers.ErrTransient && errors.Is(err, providers.ErrTransient) {
				t.Errorf("create: %v is also transient", err)
			}
			if len(tried) != tc.tries {
				t.Errorf("tried %d addresses, want %d", len(tried), tc.tries)
			}
			if len(p.Instances()) != 0 {
				t.Error("a failed create left an instance")
			}
		})
	}
}
