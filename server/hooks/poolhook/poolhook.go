// Package poolhook owns the ProxyPool's side of Metacontroller's hooks: it decodes a sync or
// finalize body whose parent is a ProxyPool and whose children are its member Proxies, reads
// the lease load of each member, asks pool.Decide, records metrics and events, and returns the
// answer. It knows nothing of HTTP routing (the server mounts it) or of how members are
// provisioned (each member's own Proxy sync does that).
package poolhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
)

// ErrBadRequest marks a body the hook cannot act on; the server answers it 400.
var ErrBadRequest = errors.New("bad pool hook request")

// ChildType is the key of member Proxies in a hook body's children.
var ChildType = metacontroller.TypeKey(v1.Kind, v1.APIVersion)

// EventRecorder records a Kubernetes Event on a pool (the client-go recorder fits behind it).
type EventRecorder interface {
	Event(p *v1.ProxyPool, eventType, reason, message string)
}

// Hooks answers the pool controller's sync and finalize calls.
type Hooks struct {
	// Load is the lease store's view of members (nil: no leases, no cooldowns, no refusals).
	Load lease.PoolLoad
	Now  func() time.Time
	Log  *slog.Logger
	// Metrics, when set, receives the pool metrics (see NewMetrics).
	Metrics *Metrics
	// Events, when set, records scale and rotation decisions on the pool.
	Events EventRecorder
	// Verify, when set, checks the body's pool against the API server before any decision:
	// a non-empty reason answers the call with the body's status and members unchanged, no
	// decision, no event (nil: the body is trusted).
	Verify func(hook string, p *v1.ProxyPool, finalizing bool) (reason string)
	// Seen, when set, keeps each pool's last answer for readers in the process (the console).
	Seen *Seen
}

// DisagreementResync is how soon Metacontroller is asked back after a body Verify refused.
const DisagreementResync = 2 * time.Second

// Handle answers one sync ("sync") or finalize ("finalize") call for a pool. It also returns
// what the decision was given (nil when the body was refused), for capture.
func (h *Hooks) Handle(ctx context.Context, hook string, body []byte) (*metacontroller.SyncResponse, *pool.Input, error) {
	now := time.Now()
	if h.Now != nil {
		now = h.Now()
	}
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var req metacontroller.SyncRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, fmt.Errorf("%w: %s request: %s", ErrBadRequest, hook, jsonError(err))
	}
	if err := req.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %s request: %s", ErrBadRequest, hook, err.Error())
	}
	p, err := decodePool(req.Parent)
	if err != nil {
		return nil, nil, err
	}
	members, err := decodeMembers(req.Children, p.Namespace)
	if err != nil {
		return nil, nil, err
	}
	finalizing := req.Finalizing || hook == "finalize"
	if h.Verify != nil {
		if reason := h.Verify(hook, p, finalizing); reason != "" {
			return &metacontroller.SyncResponse{
				Status:             p.Status,
				Children:           providers.DesiredChildren(nil, req.Children, false),
				ResyncAfterSeconds: DisagreementResync.Seconds(),
			}, nil, nil
		}
	}
	in := pool.Input{Pool: p, Finalizing: finalizing, Now: now}
	p.Spec.Default()
	in.SpecErr = p.Spec.Validate()
	var view lease.PoolView
	if h.Load != nil {
		keys := make([]string, len(members))
		for i, m := range members {
			keys[i] = m.Key()
		}
		// A view that cannot be read fails the hook (Metacontroller retries): deciding on no
		// leases would scale down or drain members that crawlers hold.
		if view, err = h.Load.PoolLoad(ctx, lease.PoolQuery{Namespace: p.Namespace, Pool: p.Name, Members: keys}); err != nil {
			return nil, nil, fmt.Errorf("pool %s: reading the lease view: %w", p.Key(), err)
		}
		in.Denied = view.Denied
	}
	for _, m := range members {
		in.Members = append(in.Members, pool.Member{Proxy: m, Leases: view.Active[m.Key()], Cooling: view.Cooling[m.Key()]})
	}
	d := pool.Decide(in)

	log = log.With("pool", p.Key(), "hook", hook)
	if in.SpecErr != nil {
		log.Error("pool spec invalid", "err", in.SpecErr)
	}
	h.observe(log, p, d)
	h.Seen.record(p, d, now)

	children := make([]json.RawMessage, 0, len(d.Children))
	for _, c := range d.Children {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, nil, fmt.Errorf("pool %s: encoding member %s: %w", p.Key(), c.Metadata.Name, err)
		}
		children = append(children, b)
	}
	return &metacontroller.SyncResponse{
		Status:             d.Status,
		Children:           children,
		ResyncAfterSeconds: d.ResyncAfter.Seconds(),
		Finalized:          d.Finalized,
	}, &in, nil
}

// observe logs, counts and records the decision's changes.
func (h *Hooks) observe(log *slog.Logger, p *v1.ProxyPool, d pool.Decision) {
	if s := d.Scale; s != nil {
		log.Info("pool scaled", "from", s.From, "to", s.To, "reason", s.Reason)
		if h.Events != nil {
			h.Events.Event(p, "Normal", "Scaled", fmt.Sprintf("desired members %d -> %d (%s)", s.From, s.To, s.Reason))
		}
	}
	for _, c := range d.Changes {
		log.Info("pool member change", "change", string(c.Kind), "member", c.Member, "reason", c.Reason)
		if h.Events == nil {
			continue
		}
		switch c.Kind {
		case pool.ChangeCreate:
			h.Events.Event(p, "Normal", "MemberCreated", fmt.Sprintf("created member %s (%s)", c.Member, c.Reason))
		case pool.ChangeDrain:
			h.Events.Event(p, "Normal", "MemberDraining", fmt.Sprintf("draining member %s (%s)", c.Member, c.Reason))
		case pool.ChangeRemove:
			h.Events.Event(p, "Normal", "MemberRemoved", fmt.Sprintf("removing member %s (%s)", c.Member, c.Reason))
		}
	}
	if h.Metrics != nil {
		h.Metrics.record(p, d)
	}
}

func decodePool(raw json.RawMessage) (*v1.ProxyPool, error) {
	var p v1.ProxyPool
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%w: parent: %s", ErrBadRequest, jsonError(err))
	}
	switch {
	case p.Kind != "" && p.Kind != v1.PoolKind:
		return nil, fmt.Errorf("%w: parent: kind %q, want %s", ErrBadRequest, p.Kind, v1.PoolKind)
	case p.APIVersion != "" && p.APIVersion != v1.APIVersion:
		return nil, fmt.Errorf("%w: parent: apiVersion %q, want %s", ErrBadRequest, p.APIVersion, v1.APIVersion)
	case p.Name == "":
		return nil, fmt.Errorf("%w: parent: metadata.name is required", ErrBadRequest)
	case p.Namespace == "":
		return nil, fmt.Errorf("%w: parent: metadata.namespace is required", ErrBadRequest)
	case p.UID == "":
		return nil, fmt.Errorf("%w: parent: metadata.uid is required", ErrBadRequest)
	case len(p.Name) > v1.MaxPoolNameLength:
		return nil, fmt.Errorf("%w: parent: metadata.name is longer than %d characters", ErrBadRequest, v1.MaxPoolNameLength)
	}
	return &p, nil
}

// decodeMembers reads the member Proxies; a child of another type is ignored (the
// CompositeController names only proxies).
func decodeMembers(children metacontroller.RelativeObjects, namespace string) ([]*v1.Proxy, error) {
	objs := children[ChildType]
	out := make([]*v1.Proxy, 0, len(objs))
	for key, raw := range objs {
		var px v1.Proxy
		if err := json.Unmarshal(raw, &px); err != nil {
			return nil, fmt.Errorf("%w: children[%s][%s]: %s", ErrBadRequest, ChildType, key, jsonError(err))
		}
		if px.Name == "" {
			return nil, fmt.Errorf("%w: children[%s][%s]: metadata.name is required", ErrBadRequest, ChildType, key)
		}
		if px.Namespace == "" {
			// Children live in the pool's namespace; a body may leave it implicit.
			px.Namespace = namespace
		}
		out = append(out, &px)
	}
	return out, nil
}

// jsonError says what is wrong with a body without echoing it.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, metacontroller.ErrTooManyObjects):
		return err.Error()
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %s: %s where %s was expected", te.Field, te.Value, te.Type)
	}
	return "malformed JSON"
}
