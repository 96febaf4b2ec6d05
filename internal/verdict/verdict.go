// Package verdict is the prober's vocabulary: what it concluded about a proxy (its state,
// latency, exit and band). The prober (health) says it, the Proxy decision (internal/lifecycle),
// the lease stores and the servers read it; it depends on nothing but the API types, so a
// package that needs the word needs nothing else (issue 35).
package verdict

import (
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// State is what the prober concluded about a proxy.
type State string

const (
	Unknown   State = "Unknown"
	Healthy   State = "Healthy"
	Unhealthy State = "Unhealthy"
)

// Health is the prober's current verdict on one proxy.
type Health struct {
	State State
	// LatencyMillis is the latency the prober reports (its choice of last value or average).
	LatencyMillis int64
	// Since is the time of the probe that made State what it is.
	Since time.Time
	// Reason is a short stable word for the last failing probe ("timeout", "refused", "status").
	Reason string
	// Exit is what the latest exit check learned (zero until one succeeded).
	Exit Exit
	// Band is the quality band ("" until the proxy is graded).
	Band v1.QualityBand
}

// Exit is the address a target sees through the proxy, what the databases say about it, and
// whether it passes the Proxy's verification. Every field moves only when the exit (or a
// database's answer about it) does.
type Exit struct {
	IP      string
	Country string
	ASN     uint32
	// Mismatch says why the exit fails verification ("" when it passes).
	Mismatch string
}
