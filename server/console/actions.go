package console

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// adminOf is the Proxy key's record when the caller may act on its namespace. A Proxy the
// caller may not read is "not found", as one that does not exist: the answer says nothing
// of other namespaces.
func (c *Console) adminOf(r *http.Request, key string) (fleet.Proxy, *access.Caller, error) {
	caller := access.FromContext(r.Context())
	ns, _, ok := strings.Cut(key, "/")
	if !ok || !caller.MayRead(ns) {
		return fleet.Proxy{}, nil, httpx.Errorf(http.StatusNotFound, "no proxy %.300q", key)
	}
	if !caller.MayAdmin(ns) {
		return fleet.Proxy{}, nil, httpx.Errorf(http.StatusForbidden, "token %s may read namespace %s, not act on it (an admin token may)", caller.Name, ns)
	}
	for _, p := range c.Discovery.Fleet.List() {
		if p.Key == key {
			return p, caller, nil
		}
	}
	return fleet.Proxy{}, nil, httpx.Errorf(http.StatusNotFound, "no proxy %.300q", key)
}

// back returns to the page the form was on.
func back(w http.ResponseWriter, r *http.Request, fallback string) {
	to := r.PostFormValue("back")
	if to == "" {
		to = fallback
	}
	http.Redirect(w, r, safeNext(to), http.StatusSeeOther)
}

// drain sets or removes the Proxy's draining label through the API server; the Proxy's next
// sync (which Metacontroller runs on the label change) records it draining in the fleet view,
// and the lease store grants no new lease on it.
func (c *Console) drain(w http.ResponseWriter, r *http.Request) error {
	key := r.PostFormValue("proxy")
	p, caller, err := c.adminOf(r, key)
	if err != nil {
		return err
	}
	if c.Kube == nil {
		return httpx.Errorf(http.StatusServiceUnavailable, "drain unavailable: %s", c.NoDrain)
	}
	drain := r.PostFormValue("drain") == "true"
	ns, name, _ := strings.Cut(p.Key, "/")
	if err := c.Kube.drain(r.Context(), ns, name, drain, caller.Name); err != nil {
		return httpx.Wrap(http.StatusBadGateway, err, "the API server refused the label patch")
	}
	c.Log.Info("console drain", "proxy", p.Key, "drain", drain, "token", caller.Name)
	back(w, r, "/ui/fleet")
	return nil
}

// release ends the lease the handle names, among those the caller may act on.
func (c *Console) release(w http.ResponseWriter, r *http.Request) error {
	handle := r.PostFormValue("lease")
	hs, _, listed, err := c.holdings(r)
	if err != nil {
		return err
	}
	if !listed {
		return httpx.Errorf(http.StatusNotImplemented, "this lease store does not list its leases")
	}
	var found *lease.Holding
	for i := range hs {
		if handleOf(hs[i].ID) == handle {
			found = &hs[i]
			break
		}
	}
	if found == nil {
		return httpx.Errorf(http.StatusNotFound, "no live lease %.40q (released or expired already?)", handle)
	}
	p, caller, err := c.adminOf(r, found.Proxy)
	if err != nil {
		return err
	}
	if err := c.Discovery.Leases.Release(r.Context(), found.ID); err != nil {
		return err
	}
	ns, name, _ := strings.Cut(p.Key, "/")
	c.Kube.event(ns, name, p.UID, ReasonLeaseReleased, fmt.Sprintf("lease of %s released from the web console by token %s", found.Holder, caller.Name))
	c.Log.Info("console release", "proxy", p.Key, "holder", found.Holder, "token", caller.Name)
	back(w, r, "/ui/leases")
	return nil
}

// clearCooldown forgets one proxy's cooldown for one site.
func (c *Console) clearCooldown(w http.ResponseWriter, r *http.Request) error {
	key, target := r.PostFormValue("proxy"), r.PostFormValue("target")
	p, caller, err := c.adminOf(r, key)
	if err != nil {
		return err
	}
	cl, ok := c.Leases.(lease.CooldownClearer)
	if !ok {
		return httpx.Errorf(http.StatusNotImplemented, "this lease store cannot clear a cooldown")
	}
	cleared, err := cl.ClearCooldown(r.Context(), p.Key, target)
	if err != nil {
		return err
	}
	if cleared {
		ns, name, _ := strings.Cut(p.Key, "/")
		c.Kube.event(ns, name, p.UID, ReasonCooldownCleared, fmt.Sprintf("cooldown for %.253s cleared from the web console by token %s", target, caller.Name))
		c.Log.Info("console clear cooldown", "proxy", p.Key, "target", target, "token", caller.Name)
	}
	back(w, r, "/ui/sites")
	return nil
}
