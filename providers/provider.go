// Package providers owns the contract between the operator and the places proxies run: the
// four-method Provider interface, the error taxonomy (errors.go), deterministic instance
// names, the GC tags, the Set of configured providers with its metrics wrapper and Close
// (set.go), and the binding of providers whose instances are Metacontroller children to one
// hook call's children (children.go). The config file and the one table of provider types are
// in providers/factory; the implementations in mock, gcp, kubernetes, aws and hetzner, and the
// suite they all pass in providertest. It knows nothing of HTTP, and of Metacontroller only
// the children of a hook call.
package providers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// GC tags carried by every instance a provider creates.
const (
	TagOwnerUID = "proxy-operator-uid"
	TagManaged  = "proxy-operator-managed"
	// TagSpecHash records the spec hash an instance was created from, so a sync that lost its
	// status write can still tell an old instance from its replacement.
	TagSpecHash = "proxy-operator-spec-hash"
	// TagCredentials records which stored credential (its version, never its content) a
	// machine that holds its credential was created with, so a rotated one replaces it.
	TagCredentials = "proxy-operator-credentials"
)

// State is an instance's lifecycle state as a provider reports it.
type State string

const (
	StateProvisioning State = "Provisioning"
	StateRunning      State = "Running"
	StateStopped      State = "Stopped"
	StateTerminated   State = "Terminated"
)

// Instance is one machine as a provider sees it.
type Instance struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	IP       string `json:"ip,omitempty"`
	State    State  `json:"state"`
	OwnerUID string `json:"ownerUID,omitempty"`
	SpecHash string `json:"specHash,omitempty"`
	// CredentialsVersion is the TagCredentials of a machine that holds its credential.
	CredentialsVersion string    `json:"credentialsVersion,omitempty"`
	CreatedAt          time.Time `json:"createdAt"`
}

// CreateRequest is everything a provider needs to create one proxy machine.
type CreateRequest struct {
	// Name is deterministic (InstanceName of the owner UID and the spec hash): a repeated
	// Create for one spec finds the instance an earlier call made instead of making a second
	// one, and a replacement gets a new name, hence a new provider ID.
	Name        string
	OwnerUID    string
	SpecHash    string
	Namespace   string
	ProxyName   string
	Region      string
	Zone        string
	MachineType string
	Image       string
	Port        int32
	CloudInit   string
	// Credentials are what the proxy must demand of every client (HTTP Basic proxy auth).
	// Never nil for a Managed proxy once credentials exist; a provider must not log them.
	Credentials *Credentials
	// CredentialsVersion identifies Credentials (it changes when they are rotated); a
	// provider that bakes them into the machine tags it with TagCredentials.
	CredentialsVersion string
}

// Tags are the labels every created instance must carry (TagCredentials when there is a
// credentials version).
func (r CreateRequest) Tags() map[string]string {
	t := map[string]string{TagOwnerUID: r.OwnerUID, TagManaged: "true", TagSpecHash: r.SpecHash}
	if r.CredentialsVersion != "" {
		t[TagCredentials] = r.CredentialsVersion
	}
	return t
}

// Provider is the whole contract a cloud must implement. Every method takes a context with a
// deadline and returns errors wrapped around the sentinels in errors.go.
type Provider interface {
	// Create starts creating the instance and returns its provider ID, possibly before it runs.
	// Idempotent: if an instance named req.Name exists, it returns that instance's ID.
	Create(ctx context.Context, req CreateRequest) (providerID string, err error)
	// Get returns the instance's current state; an instance that does not exist returns
	// (nil, an error matching ErrNotFound), which is a normal answer.
	Get(ctx context.Context, providerID string) (*Instance, error)
	// Delete starts deleting the instance. Idempotent: a missing instance is not an error.
	Delete(ctx context.Context, providerID string) error
	// ListByTag returns every instance carrying TagManaged=true, for orphan GC.
	ListByTag(ctx context.Context) ([]Instance, error)
}

// OwnerLister is an optional capability: a provider that can list one owner's instances more
// cheaply than ListByTag (a server-side label filter) implements it. Use ListByOwner.
type OwnerLister interface {
	// ListByOwner returns the instances carrying TagManaged=true and TagOwnerUID=ownerUID.
	ListByOwner(ctx context.Context, ownerUID string) ([]Instance, error)
}

// CreateChecker is an optional capability: a provider that refuses some create requests
// without calling its cloud (a missing zone, a malformed image) says so before any call.
type CreateChecker interface {
	// CheckCreate returns the error Create would return for req without calling the cloud,
	// or nil when only the cloud can tell.
	CheckCreate(req CreateRequest) error
}

// CheckCreate asks p (or a provider it wraps) whether req can be refused without a call; nil
// when p cannot tell.
func CheckCreate(p Provider, req CreateRequest) error {
	for p != nil {
		if c, ok := p.(CreateChecker); ok {
			return c.CheckCreate(req)
		}
		u, ok := p.(interface{ Unwrap() Provider })
		if !ok {
			return nil
		}
		p = u.Unwrap()
	}
	return nil
}

// ListByOwner returns the instances of one owner (by their GC tags): through p's OwnerLister
// if it has one, else ListByTag filtered here.
func ListByOwner(ctx context.Context, p Provider, ownerUID string) ([]Instance, error) {
	if ol, ok := p.(OwnerLister); ok {
		return ol.ListByOwner(ctx, ownerUID)
	}
	all, err := p.ListByTag(ctx)
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, in := range all {
		if in.OwnerUID == ownerUID {
			out = append(out, in)
		}
	}
	return out, nil
}

// InstanceName is the deterministic instance name of a Proxy's machine for one spec:
// "proxy-" + 12 hex of sha256(UID) + "-" + the first 10 characters of the spec hash. A spec
// change (a replacement) therefore names a new machine, and so a new provider ID. An empty
// hash gives "proxy-" + 12 hex, the name machines had before the hash was part of it.
func InstanceName(uid, specHash string) string {
	sum := sha256.Sum256([]byte(uid))
	name := "proxy-" + hex.EncodeToString(sum[:])[:12]
	if specHash == "" {
		return name
	}
	return name + "-" + specHash[:min(10, len(specHash))]
}

// Owned reports whether inst carries uid's owner tag: the operator never acts on an instance
// it cannot show belongs to the Proxy asking, whatever that Proxy's status names.
func Owned(inst *Instance, uid string) bool {
	return inst != nil && uid != "" && inst.OwnerUID == uid
}
