package hooks

import (
	"time"

	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/pool"
)

// Exchange is one hook call as handled, for capture: the bytes on the wire and, when the call
// got as far as a decision, what the decision was given and what it answered.
type Exchange struct {
	Hook     string
	Now      time.Time
	Request  []byte
	Code     int
	Response []byte
	// ProviderType is the configured provider's type ("mock", "gcp", "kubernetes"), empty
	// when the Proxy names no configured provider.
	ProviderType string
	// Input is what lifecycle.Decide was given last (with the action's Outcome, if one ran);
	// its Proxy is nil when the call failed before the parent was decoded. Instance and
	// ObserveErr are set only when the provider was asked.
	Input lifecycle.Input
	// Decision is the final decision (zero when none was made).
	Decision lifecycle.Decision
	// Pool is what pool.Decide was given, for the pool hooks (nil otherwise, or when the body
	// was refused).
	Pool *pool.Input
}

// Provider is spec.provider of the parent ("" when the call failed before decoding it).
func (ex *Exchange) Provider() string {
	if ex.Input.Proxy == nil {
		return ""
	}
	return ex.Input.Proxy.Spec.Provider
}

// Recorder receives every handled hook call (the capture feature).
type Recorder interface {
	Record(Exchange)
}

// capture hands a finished call to the recorder, if any. An error that is not an answer
// (a 500 from an unexpected failure) is not captured.
func (h *Hooks) capture(ex *Exchange) {
	if h.Recorder != nil && ex.Code != 0 {
		h.Recorder.Record(*ex)
	}
}
