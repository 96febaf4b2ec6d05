package server

import (
	"net"
	"net/url"
	"strings"

	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
)

// gatewayEgress is the gateway's egress policy (decision 0250): the proxy policy of e with
// the loopback exception of mock providers, plus the target rules, with the process's own
// listeners and the lease store's addresses (store, a -lease-store URL) refused whatever
// e.TargetAllow says. demoSite, when not empty, is the demo site's address: a target allowed
// by its exact address, so `make run` crawls it with no loopback range opened.
func gatewayEgress(e EgressConfig, loopbackProviders, own []string, store, demoSite string) (*netpolicy.Policy, error) {
	var listeners []string
	for _, a := range own {
		if a != "" {
			listeners = append(listeners, a)
		}
	}
	var demo []string
	if demoSite != "" {
		demo = []string{demoSite}
	}
	return netpolicy.New(netpolicy.Config{AllowLoopback: e.AllowLoopback, LoopbackProviders: loopbackProviders,
		ExternalCIDRs: e.ExternalCIDRs, OwnListeners: listeners, Protected: storeAddrs(store),
		TargetAllow: e.TargetAllow, TargetAllowAddrs: demo, ClusterSuffixes: e.TargetDenySuffixes})
}

// storeAddrs are the host:port addresses a -lease-store URL names (comma-separated hosts and
// addr= parameters included; the Redis default port when none is given). A Sentinel's
// masters and a Cluster's other nodes are found at run time: in a cluster they are on the
// private ranges every target check refuses anyway.
func storeAddrs(store string) []string {
	if store == "" {
		return nil
	}
	u, err := url.Parse(store)
	if err != nil {
		return nil
	}
	def := "6379"
	if strings.Contains(u.Scheme, "sentinel") {
		def = "26379"
	}
	var out []string
	for _, h := range append(strings.Split(u.Host, ","), u.Query()["addr"]...) {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), def)
		}
		out = append(out, h)
	}
	return out
}
