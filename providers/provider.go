// Package providers owns the contract between the operator and the places proxies run: the
// four-method Provider interface, the error taxonomy (errors.go), deterministic instance
// names, the GC tags, the Set of configured providers with its metrics wrapper and Close
// (set.go), and the binding of providers whose instances are Metacontroller children to one
// hook call's children (children.go). The config file and the one table of provider types are
// in providers/factory; the implementations in mock, gcp and kubernetes. It knows nothing of
// HTTP, and of Metacontroller only the children of a hook call.
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
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	IP        string    `json:"ip,omitempty"`
	State     State     `json:"state"`
	OwnerUID  string    `json:"ownerUID,omitempty"`
	SpecHash  string    `json:"specHash,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateRequest is everything a provider needs to create one proxy machine.
type CreateRequest struct {
	// Name is deterministic (InstanceName of the owner UID): a repeated Create finds the
	// instance an earlier call made instead of making a second one.
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
}

// Tags are the labels every created instance must carry.
func (r CreateRequest) Tags() map[string]string {
	return map[string]string{TagOwnerUID: r.OwnerUID, TagManaged: "true", TagSpecHash: r.SpecHash}
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

// InstanceName is the deterministic instance name of a Proxy: "proxy-" + a short hash of its UID.
func InstanceName(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return "proxy-" + hex.EncodeToString(sum[:])[:12]
}

// Owned reports whether inst carries uid's owner tag: the operator never acts on an instance
// it cannot show belongs to the Proxy asking, whatever that Proxy's status names.
func Owned(inst *Instance, uid string) bool {
	return inst != nil && uid != "" && inst.OwnerUID == uid
}
