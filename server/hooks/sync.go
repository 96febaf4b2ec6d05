package hooks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// decodeParent reads and checks the parent Proxy of a hook body.
func decodeParent(raw json.RawMessage) (*v1.Proxy, error) {
	var p v1.Proxy
	if err := httpx.DecodeJSON(raw, &p, "parent"); err != nil {
		return nil, err
	}
	switch {
	case p.Kind != "" && p.Kind != v1.Kind:
		return nil, httpx.Errorf(http.StatusBadRequest, "parent: kind %q, want %s", p.Kind, v1.Kind)
	case p.APIVersion != "" && p.APIVersion != v1.APIVersion:
		return nil, httpx.Errorf(http.StatusBadRequest, "parent: apiVersion %q, want %s", p.APIVersion, v1.APIVersion)
	case p.Name == "":
		return nil, httpx.Errorf(http.StatusBadRequest, "parent: metadata.name is required")
	case p.Namespace == "":
		return nil, httpx.Errorf(http.StatusBadRequest, "parent: metadata.namespace is required")
	case p.UID == "":
		return nil, httpx.Errorf(http.StatusBadRequest, "parent: metadata.uid is required")
	}
	return &p, nil
}

// sync answers sync and finalize: build the decision's input, observe, decide, act at most
// once, decide again with the outcome, record the proxy in the fleet view.
func (h *Hooks) sync(ctx context.Context, hook string, body []byte, ex *Exchange) (any, error) {
	var req metacontroller.SyncRequest
	if err := httpx.DecodeJSON(body, &req, hook+" request"); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, httpx.Wrap(http.StatusBadRequest, err, "%s request", hook)
	}
	p, err := decodeParent(req.Parent)
	if err != nil {
		return nil, err
	}
	finalizing := req.Finalizing || hook == "finalize"
	log := h.Log.With("proxy", p.Key(), "hook", hook)
	// Before anything can be deleted or handed out on this body's word, the API server must
	// say the same: until it does, nothing is observed, decided, recorded or deleted.
	if h.disagrees(log, hook, p, finalizing) != "" {
		return unchanged(p.Status, req.Children), nil
	}
	st, err := h.inputFor(ctx, log, &req, p, finalizing, ex.Now)
	if err != nil {
		return nil, err
	}
	in, entry, children, observed, cred := st.in, st.entry, st.children, st.observed, st.cred
	d := lifecycle.Decide(in)
	if d.Action != nil {
		in.Outcome = h.run(ctx, log, entry, *d.Action)
		d = lifecycle.Decide(in)
	}
	ex.ProviderType, ex.Input, ex.Decision = entry.Type, in, d
	if in.ProviderKnown {
		h.setRetry(p, finalizing, d)
	}
	h.record(log, p, d, h.proxyCredentials(log, p, cred, req.Related), in.SpecErr != nil)
	if h.Events != nil {
		if evs := events.For(in, d); len(evs) > 0 {
			h.Events.Record(p, evs)
		}
	}
	kids := providers.DesiredChildren(children, observed, finalizing)
	if cred != nil {
		kids = append(kids, cred.Child)
	}
	resp := metacontroller.SyncResponse{
		Status:             d.Status,
		Children:           kids,
		ResyncAfterSeconds: d.ResyncAfter.Seconds(),
		Finalized:          d.Finalized,
	}
	return resp, nil
}

// syncState is a Proxy sync's input to the decision and what acting on the decision and
// answering need: the provider entry, the children-bound provider, the observed children
// (without the credential Secret) and the Proxy's credential.
type syncState struct {
	in       lifecycle.Input
	entry    providers.Entry
	children providers.BoundProvider
	observed metacontroller.RelativeObjects
	cred     *credentials.Managed
}

// inputFor turns a hook request into the decision's input: the spec checked (and its
// external endpoint against the egress policy), the health verdict, the provider, the
// credential and cloud-init resolved, and the instance observed unless a retry is pending.
func (h *Hooks) inputFor(ctx context.Context, log *slog.Logger, req *metacontroller.SyncRequest, p *v1.Proxy, finalizing bool, now time.Time) (syncState, error) {
	in := lifecycle.Input{Proxy: p, Finalizing: finalizing, Now: now}
	in.SpecErr = p.Spec.Validate()
	p.Spec.Default()
	if ep := p.Spec.Endpoint; in.SpecErr == nil && h.Egress != nil && p.Spec.Mode == v1.ModeExternal && ep != nil {
		if err := h.Egress.CheckHost(ep.Host, uint16(ep.Port), netpolicy.Dest{External: true}); err != nil {
			in.SpecErr = fmt.Errorf("spec.endpoint: egress denied: %w", err)
		}
	}
	key := p.Key()
	in.Health = h.Health.Health(key)
	if in.Health.State == verdict.Unknown && h.Fleet != nil {
		// First sync since a restart: the prober has not met this proxy yet. Keep what status
		// recorded rather than flap the fleet to Unknown.
		if _, seen := h.Fleet.Get(key); !seen {
			in.Health = lifecycle.RecordedHealth(p.Status)
		}
	}
	var entry providers.Entry
	// A spec that turned invalid after its instance was made must still let the Proxy be
	// deleted: finalize looks the provider up whatever the spec says.
	if p.Spec.Mode == v1.ModeManaged && p.Spec.Provider != "" && (in.SpecErr == nil || finalizing) {
		entry, in.ProviderKnown = h.Providers.Lookup(p.Spec.Provider)
		if !finalizing {
			in.CloudInit, in.CloudInitErr = resolveCloudInit(p, req.Related)
		}
	}
	// A provider whose instances are Metacontroller children acts through this call's
	// children; every other provider is returned unchanged.
	parent := providers.Parent{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	observed := req.Children
	var children providers.BoundProvider
	var cred *credentials.Managed
	if in.ProviderKnown {
		if !finalizing {
			// The Proxy's credential: read back from its Secret child, or generated for it.
			// The Secret is answered by this hook, not kept by the pass-through.
			c, err := credentials.ForManaged(parent, req.Children)
			if err != nil {
				return syncState{}, err
			}
			if c.Discarded != "" {
				log.Warn("credentials secret unusable: dropped for a new one", "reason", c.Discarded)
			}
			cred, observed = &c, withoutSecrets(req.Children)
			in.Credentials, in.CredentialsPending = &c.Credentials, !c.Stored
		}
		entry.Provider, children, _ = providers.BindChildren(entry.Provider, parent, observed)
		if cred != nil && children == nil {
			// The machine holds the credential (mock, GCP): a rotated one replaces it. A Pod
			// reads the mounted Secret instead, and keeps running.
			in.CredentialsVersion = cred.Version
		}
		in.RetryAt = h.retryAt(p, finalizing)
	}
	if in.ProviderKnown && !in.RetryAt.After(in.Now) {
		in.Instance, in.ObserveErr = h.observe(ctx, entry, p, finalizing, in.CloudInit)
		if in.ObserveErr != nil {
			log.Error("provider observe failed", "provider", entry.Name, "providerID", p.Status.ProviderID, "err", in.ObserveErr)
		}
		if inst := in.Instance; inst != nil && !providers.Owned(inst, string(p.UID)) {
			// status.providerID can be written by whoever may write the Proxy's status: an
			// instance another Proxy owns is not this one's, whatever the status says.
			log.Warn("instance not owned by this proxy: ignored", "provider", entry.Name, "providerID", inst.ID, "ownerUID", inst.OwnerUID)
			in.ForeignInstance, in.ForeignOwner, in.Instance = inst.ID, inst.OwnerUID, nil
		}
	}
	if fs := h.Fleet; fs != nil && h.HealthResync != nil {
		in.HealthResync = h.HealthResync(fs.Len(), *p.Spec.HealthCheck)
	}
	return syncState{in: in, entry: entry, children: children, observed: observed, cred: cred}, nil
}

// observe asks the provider what exists for this Proxy.
func (h *Hooks) observe(ctx context.Context, e providers.Entry, p *v1.Proxy, finalizing bool, cloudInit string) (*providers.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, h.ProviderTimeout)
	defer cancel()
	if id := p.Status.ProviderID; id != "" {
		inst, err := e.Provider.Get(ctx, id)
		if !errors.Is(err, providers.ErrNotFound) {
			return inst, err
		}
	}
	// No recorded instance, or the recorded one is gone: about to create. A crash between a
	// Create and its status write may have left an instance only its tags can find, and since
	// names carry the spec hash, creating again finds it only if the spec is unchanged. So look
	// for this owner's instances by tag; the sync core adopts one of the current spec and
	// deletes any other before it creates. (Finalize and a Failed Proxy, which creates no
	// more, need the same lookup.) The cost is one list per creation, never in steady state.
	// A spec the provider refuses without a call (a GCP placement without a zone) reaches no
	// cloud, not even to list: Create reports it. Finalize always looks.
	if !finalizing && providers.CheckCreate(e.Provider, lifecycle.CreateRequest(p, cloudInit)) != nil {
		return nil, nil
	}
	insts, err := providers.ListByOwner(ctx, e.Provider, string(p.UID))
	if err != nil {
		return nil, err
	}
	return pickInstance(insts), nil
}

// pickInstance chooses which of an owner's unrecorded instances a sync looks at first: one
// that is not stopped or terminated, then the newest, then by ID, so the choice is
// deterministic. The others are found by the next syncs' lookups once it is dealt with.
func pickInstance(insts []providers.Instance) *providers.Instance {
	if len(insts) == 0 {
		return nil
	}
	gone := func(in providers.Instance) bool {
		return in.State == providers.StateStopped || in.State == providers.StateTerminated
	}
	best := 0
	for i := 1; i < len(insts); i++ {
		a, b := insts[i], insts[best]
		switch {
		case gone(a) != gone(b):
			if !gone(a) {
				best = i
			}
		case !a.CreatedAt.Equal(b.CreatedAt):
			if a.CreatedAt.After(b.CreatedAt) {
				best = i
			}
		case a.ID < b.ID:
			best = i
		}
	}
	return &insts[best]
}

// run performs one action against the provider and reports its outcome.
func (h *Hooks) run(ctx context.Context, log *slog.Logger, e providers.Entry, a lifecycle.Action) *lifecycle.Outcome {
	ctx, cancel := context.WithTimeout(ctx, h.ProviderTimeout)
	defer cancel()
	o := &lifecycle.Outcome{Action: a}
	switch a.Kind {
	case lifecycle.ActionCreate:
		o.ProviderID, o.Err = e.Provider.Create(ctx, a.Create)
		if o.Err == nil {
			log.Info("instance create started", "provider", e.Name, "providerID", o.ProviderID, "name", a.Create.Name, "specHash", a.Create.SpecHash)
		}
	case lifecycle.ActionDelete:
		o.Err = e.Provider.Delete(ctx, a.ProviderID)
		if o.Err == nil {
			log.Info("instance delete started", "provider", e.Name, "providerID", a.ProviderID)
		}
	}
	if o.Err != nil {
		log.Error("provider call failed", "provider", e.Name, "op", string(a.Kind), "providerID", a.ProviderID, "err", o.Err)
	}
	return o
}

// withoutSecrets is the observed children without the Secrets, which the credentials code
// answers for itself.
func withoutSecrets(observed map[string]map[string]json.RawMessage) map[string]map[string]json.RawMessage {
	if _, ok := observed[credentials.SecretTypeKey]; !ok {
		return observed
	}
	out := make(map[string]map[string]json.RawMessage, len(observed))
	for k, v := range observed {
		if k != credentials.SecretTypeKey {
			out[k] = v
		}
	}
	return out
}

// proxyCredentials is the credential the proxy demands now: a Managed proxy's stored one (while
// a rotated one is not stored yet, the machine still holds the previous one); an External
// proxy's from the Secret its spec names; nil when there is none.
func (h *Hooks) proxyCredentials(log *slog.Logger, p *v1.Proxy, cred *credentials.Managed, related metacontroller.RelativeObjects) *fleet.Credentials {
	switch {
	case cred != nil && cred.Stored:
		c := cred.Credentials
		return &c
	case cred != nil:
		if h.Fleet != nil {
			if prev, ok := h.Fleet.Get(p.Key()); ok {
				return prev.Credentials
			}
		}
		return nil
	case p.Spec.Mode == v1.ModeExternal && p.Spec.CredentialsSecretRef != nil:
		c, err := credentials.ForExternal(p.Namespace, p.Spec.CredentialsSecretRef.Name, related)
		if err != nil {
			// Probes then go without a credential and fail as proxy_auth: the status says so.
			log.Warn("external proxy credentials unusable", "err", err)
			return nil
		}
		return &c
	}
	return nil
}

// record updates the fleet view and logs phase transitions.
func (h *Hooks) record(log *slog.Logger, p *v1.Proxy, d lifecycle.Decision, creds *fleet.Credentials, invalid bool) {
	if p.Status.Phase != d.Status.Phase {
		log.Info("phase changed", "from", string(p.Status.Phase), "to", string(d.Status.Phase), "providerID", d.Status.ProviderID)
	}
	if h.Fleet == nil {
		return
	}
	if d.Finalized {
		h.Fleet.Remove(p.Key())
		return
	}
	attrs, maxLeases := fleet.WithExit(p.Spec.Attributes, d.Status.Exit), *p.Spec.MaxLeases
	if invalid {
		// An invalid spec is listed (Failed, with its condition) but none of it is kept: its
		// attributes may be of any size and its maxLeases of any count (issue 21: 61 Proxies
		// with 44 KB values kept 254 MiB and made every list 8 MB).
		attrs, maxLeases = nil, 0
	}
	vendor := p.Spec.Vendor
	if invalid {
		vendor = nil
	}
	attrs = fleet.WithSource(attrs, vendor != nil)
	h.Fleet.Upsert(fleet.Proxy{
		Key:         p.Key(),
		UID:         string(p.UID),
		Generation:  p.Generation,
		Mode:        p.Spec.Mode,
		Provider:    p.Spec.Provider,
		ProviderID:  d.Status.ProviderID,
		IP:          cmp.Or(d.Status.IP, d.ProbeIP),
		Port:        p.Spec.ListenPort(),
		Attributes:  attrs,
		MaxLeases:   maxLeases,
		HealthCheck: *p.Spec.HealthCheck,
		Phase:       d.Status.Phase,
		Recorded:    lifecycle.RecordedHealth(d.Status),
		Deleting:    p.DeletionTimestamp != nil || d.Status.Phase == v1.PhaseDeleting,
		Credentials: creds,
		// A pool drains a member by labelling it; the lease store then grants it no lease.
		Draining:        p.Labels[v1.PoolDrainingLabel] == "true",
		AwaitingVerdict: d.ProbeIP != "",
		Verify:          p.Spec.Verify,
		Vendor:          vendor,
	})
}
