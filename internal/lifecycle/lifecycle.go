// Package lifecycle owns the decision at the heart of the operator: given a Proxy, what its
// provider shows, what the prober believes and the time, it returns the full desired status,
// at most one provider action and when to look again. It does no I/O and reads no clock, so
// the same inputs always give the same bytes. It knows nothing of HTTP or Metacontroller.
package lifecycle

import (
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
)

// ActionKind is what the webhook must ask the provider to do.
type ActionKind string

const (
	ActionCreate ActionKind = "Create"
	ActionDelete ActionKind = "Delete"
)

// Action is one idempotent provider call.
type Action struct {
	Kind       ActionKind
	ProviderID string                  // Delete
	Create     providers.CreateRequest // Create
}

// Outcome is what came of the action decided on the first pass.
type Outcome struct {
	Action     Action
	ProviderID string // from Create
	Err        error
}

// Input is everything the decision depends on.
type Input struct {
	// Proxy is the parent as Metacontroller sent it, spec defaulted, status as last written.
	Proxy *v1.Proxy
	// Finalizing is true when the Proxy is being deleted.
	Finalizing bool
	// SpecErr says why the spec makes no sense even though the body was well formed.
	SpecErr error
	// ProviderKnown says spec.provider names a configured provider (Managed only).
	ProviderKnown bool
	// CloudInit is the resolved user-data; CloudInitErr says why it could not be resolved.
	CloudInit    string
	CloudInitErr error
	// Credentials is the Proxy's stored credential, given to a machine that is created.
	// CredentialsPending says the credential is not stored yet (its Secret is in this answer
	// for Metacontroller to create): no machine is created until it is, so a machine never
	// holds a credential that a crash before the Secret's creation would lose.
	Credentials        *providers.Credentials
	CredentialsPending bool
	// CredentialsVersion identifies the stored credential when the provider bakes it into
	// the machine (empty when the machine reads it from the Secret): a machine created with
	// another one (Instance.CredentialsVersion) is replaced, so rotating replaces it.
	CredentialsVersion string
	// Instance is what the provider shows for this Proxy (nil: none exists);
	// ObserveErr is a failed observation other than not-found.
	Instance   *providers.Instance
	ObserveErr error
	// ForeignInstance is the provider ID status.providerID named whose instance carries
	// another owner's tag (or none): the webhook passes Instance nil, as not found, so nothing
	// acts on it, and the status says so. ForeignOwner is the owner tag it carries.
	ForeignInstance string
	ForeignOwner    string
	// Outcome is set on the second pass, after the webhook ran the first pass's action.
	Outcome *Outcome
	// Health is the prober's verdict.
	Health verdict.Health
	// HealthResync is how soon a steady proxy should be synced again so that a health
	// transition reaches its status; 0 means DefaultHealthResync.
	HealthResync time.Duration
	// Now is the time of the sync.
	Now time.Time
	// RetryAt is the end of the wait a failed provider call set (Decision.RetryAt) for this
	// generation. Before it no provider call is made and the status is carried over: the
	// status write that recorded the failure makes Metacontroller sync again at once, and
	// that echo must not defeat the backoff.
	RetryAt time.Time
}

// Decision is the outcome of Decide.
type Decision struct {
	Status      v1.ProxyStatus
	Action      *Action
	ResyncAfter time.Duration
	Finalized   bool
	// RetryAt is set when the decision waits on a provider error (quota, transient, blocked
	// delete): the provider must not be called for this Proxy before it.
	RetryAt time.Time
	// ProbeIP is an address to probe that Status does not show yet: a new instance's, from
	// the moment it runs until its first verdict, while the answered status stays the
	// previous one (Provisioning) so that it goes to Ready or Unhealthy in one write.
	ProbeIP string
}

// Resync delays.
const (
	DefaultHealthResync = 30 * time.Second
	ProvisionPoll       = 5 * time.Second
	DeletePoll          = 3 * time.Second
	QuotaResync         = 5 * time.Minute
	BackoffBase         = 5 * time.Second
	BackoffCap          = 5 * time.Minute
	// BlockedResync paces a finalize that cannot make progress without a human.
	BlockedResync = time.Minute
)

// Condition reasons.
const (
	ReasonCreating            = "Creating"
	ReasonRunning             = "Running"
	ReasonReplacing           = "Replacing"
	ReasonInstanceLost        = "InstanceLost"
	ReasonDeleting            = "Deleting"
	ReasonExternal            = "External"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonUnknownProvider     = "UnknownProvider"
	ReasonCloudInitError      = "CloudInitError"
	ReasonQuotaExceeded       = "QuotaExceeded"
	ReasonTransientError      = "TransientError"
	ReasonPermanentError      = "PermanentError"
	ReasonAwaitingInstance    = "AwaitingInstance"
	ReasonAwaitingCredentials = "AwaitingCredentials"
	ReasonAwaitingProbe       = "AwaitingProbe"
	ReasonProbeSucceeded      = "ProbeSucceeded"
	ReasonProbeFailed         = "ProbeFailed"
	ReasonOwnerMismatch       = "OwnerMismatch"
	ReasonExitVerified        = "ExitVerified"
	ReasonExitMismatch        = "ExitMismatch"
)

// Backoff is the resync delay after n consecutive transient failures: 5s doubling, capped at 5m.
func Backoff(n int32) time.Duration {
	d := BackoffBase
	for i := int32(1); i < n && d < BackoffCap; i++ {
		d *= 2
	}
	return min(d, BackoffCap)
}
