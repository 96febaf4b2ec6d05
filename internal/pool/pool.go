// Package pool owns the decision at the heart of a ProxyPool: given the pool, its member
// Proxies with their status, the lease load and cooldowns on each, the discovery API's
// no-capacity count and the time, it returns the member Proxies that should exist, the pool's
// full status, what changed and when to look again. It does no I/O and reads no clock, so the
// same inputs always give the same bytes. It knows nothing of HTTP, Metacontroller or how the
// members themselves are provisioned (that is each member Proxy's own sync).
package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// Member is one observed member Proxy and what the lease store knows of it.
type Member struct {
	// Proxy is the child as Metacontroller sent it, status included.
	Proxy *v1.Proxy
	// Leases is the number of live leases on it.
	Leases int
	// Cooling is the number of distinct targets it is cooling down for.
	Cooling int
}

// Input is everything the decision depends on.
type Input struct {
	// Pool is the parent, spec defaulted (see (*v1.ProxyPoolSpec).Default), status as last written.
	Pool *v1.ProxyPool
	// Members are the observed member Proxies, finalizing ones included.
	Members []Member
	// Denied is the discovery API's running count of no-capacity (409) answers that found
	// this pool's members full. It may restart from 0 with the process.
	Denied int64
	// Finalizing is true when the pool is being deleted.
	Finalizing bool
	// SpecErr says why the spec makes no sense though the body was well formed: members
	// are then kept as they are, none is made or removed.
	SpecErr error
	// Now is the time of the sync.
	Now time.Time
}

// ChangeKind is what a decision does to one member.
type ChangeKind string

const (
	ChangeCreate ChangeKind = "Create" // a new member
	ChangeDrain  ChangeKind = "Drain"  // a member stops taking leases
	ChangeRemove ChangeKind = "Remove" // a drained member is deleted
)

// Reasons a member is replaced or removed (also the drain-reason annotation and metric label).
const (
	ReasonTemplate   = "Template"   // made from an older template
	ReasonMaxAge     = "MaxAge"     // older than rotation.maxAge
	ReasonBanned     = "Banned"     // cooling down for at least rotation.banThreshold targets
	ReasonLowQuality = "LowQuality" // its quality band is below rotation.minBand
	ReasonFailed     = "Failed"     // its Proxy is Failed
	ReasonScaleDown  = "ScaleDown"  // the pool shrank
	ReasonDeleted    = "PoolDeleted"
	// Remove reasons.
	ReasonDrained      = "Drained"      // its last lease ended
	ReasonDrainExpired = "DrainExpired" // drainSeconds ran out with leases left
)

// Change is one thing the decision does, for events and metrics.
type Change struct {
	Kind   ChangeKind
	Member string
	Reason string
}

// Scale is a change of the desired size.
type Scale struct {
	From, To int32
	// Reason is "Spec" (replicas changed) or "Autoscale".
	Reason string
}

// Decision is the outcome of Decide.
type Decision struct {
	Status v1.ProxyPoolStatus
	// Children are the member Proxies that should exist, sorted by name.
	Children    []Child
	ResyncAfter time.Duration
	Finalized   bool
	Changes     []Change
	Scale       *Scale
}

// Child is a desired member Proxy: only what the pool decides, never status.
type Child struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ChildMeta    `json:"metadata"`
	Spec       v1.ProxySpec `json:"spec"`
}

// ChildMeta is a desired member's metadata.
type ChildMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Resync delays.
const (
	// ProgressPoll paces a pool with members on the way in or out: lease counts are not
	// Kubernetes objects, so nothing else wakes the pool when a draining member's last lease ends.
	ProgressPoll = 10 * time.Second
	// AutoscalePoll paces an autoscaled pool: demand is not a Kubernetes object either.
	AutoscalePoll = 15 * time.Second
	// SteadyResync paces a pool with nothing pending and no autoscale.
	SteadyResync = 5 * time.Minute
	// FailedReplaceAfter is how long a Failed member made from the current template stays
	// before it is replaced: a broken template must not churn machines in a tight loop.
	FailedReplaceAfter = 5 * time.Minute
	// FinalizePoll paces a pool waiting for its members to finish deleting.
	FinalizePoll = 5 * time.Second
)

// TemplateHash is the hash of everything in the template; members carrying another hash are
// outdated and replaced. Call it on a defaulted template so an explicit default does not
// roll the pool.
func TemplateHash(t *v1.ProxyTemplate) string {
	b, _ := json.Marshal(t)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:10]
}

// MemberName is the name of the pool's member with that template hash and ordinal: the pool
// name and five hex digits of a hash of both. Ordinals only grow (the next one is above every
// observed member's, finalizing ones included), so a name is never handed out while an earlier
// holder still exists.
func MemberName(pool, templateHash string, ordinal int64) string {
	sum := sha256.Sum256([]byte(templateHash + "/" + strconv.FormatInt(ordinal, 10)))
	return pool + "-" + hex.EncodeToString(sum[:])[:5]
}

// Selector is the label selector of a pool's members (status.selector).
func Selector(pool string) string { return v1.PoolLabel + "=" + pool }
