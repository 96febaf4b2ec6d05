package health

import (
	"strconv"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

// startSquid runs a real Squid on a free loopback port that allows CONNECT only to
// allowPort, and returns its address; extra lines are added to its config. It stops when the
// test ends.
func startSquid(t *testing.T, allowPort string, extra ...string) string {
	t.Helper()
	return squidtest.Start(t, squidtest.Options{ConnectPorts: []string{allowPort}, Extra: extra})
}

func TestSchedulerThroughRealSquid(t *testing.T) {
	target := newTLSTarget(t)
	squid := startSquid(t, target.port())
	// A port that is not the target's: Squid's ACL denies the CONNECT.
	denied, _ := strconv.Atoi(target.port())
	strict := startSquid(t, strconv.Itoa(denied%60000+1))

	view := fleet.New(time.Now, 0)
	// 2 s probe timeouts (20 test units): a warm Squid answers in milliseconds, and the margin
	// keeps a busy 2-core machine from turning its 403 into a timeout.
	view.Upsert(proxyAt(t, "ns/squid", squid, target.url(), 20, 20, 2, 1))
	view.Upsert(proxyAt(t, "ns/strict", strict, target.url(), 20, 20, 2, 1))
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil)

	waitHealth(t, s, "ns/squid", verdict.Healthy)
	if h := waitHealth(t, s, "ns/strict", verdict.Unhealthy); h.Reason != KindConnectDenied {
		t.Errorf("denied CONNECT reason: got %q, want %q", h.Reason, KindConnectDenied)
	}

	target.srv.Close()
	if h := waitHealth(t, s, "ns/squid", verdict.Unhealthy); h.Reason != KindUpstream {
		t.Errorf("target gone reason: got %q, want %q", h.Reason, KindUpstream)
	}
}
