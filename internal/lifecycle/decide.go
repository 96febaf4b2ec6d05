package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
)

// Decide returns the full desired status, at most one action and the resync delay. On the
// second pass (in.Outcome set) it never returns an action.
func Decide(in Input) Decision {
	p := in.Proxy
	d := &decider{in: in, prev: p.Status, gen: p.Generation}
	d.st = v1.ProxyStatus{
		ObservedGeneration:  p.Generation,
		Phase:               p.Status.Phase,
		ProviderID:          p.Status.ProviderID,
		IP:                  p.Status.IP,
		SpecHash:            p.Status.SpecHash,
		FailureCount:        p.Status.FailureCount,
		LastHealthCheckTime: p.Status.LastHealthCheckTime,
		LatencyMillis:       p.Status.LatencyMillis,
		Exit:                p.Status.Exit,
		QualityBand:         p.Status.QualityBand,
	}
	if in.ForeignInstance != "" && d.st.ProviderID == in.ForeignInstance {
		// Not ours: forget the pointer so nothing later acts on it.
		d.st.ProviderID = ""
	}
	if in.SpecErr != nil && !in.Finalizing {
		d.invalid(in.SpecErr)
	} else if p.Spec.Mode == v1.ModeExternal {
		d.external()
	} else if in.Finalizing {
		d.finalizeManaged()
	} else {
		d.syncManaged()
	}
	if d.st.Phase == "" {
		d.st.Phase = v1.PhasePending
	}
	d.exitCondition()
	d.readiness()
	d.foreignCondition()
	d.out.Status = d.st
	return d.out
}

// foreignCondition reports an instance ignored because another Proxy owns it; the condition
// stays for the rest of the generation so the one sync that saw it is not the only record.
func (d *decider) foreignCondition() {
	if id := d.in.ForeignInstance; id != "" {
		owner := d.in.ForeignOwner
		if owner == "" {
			owner = "none"
		}
		d.setCondition(v1.ConditionForeignInstanceIgnored, metav1.ConditionTrue, ReasonOwnerMismatch,
			fmt.Sprintf("status.providerID named instance %s, whose owner tag (%s) is not this Proxy's UID; it was ignored, not read or deleted", id, owner))
		return
	}
	if c := findCondition(d.prev.Conditions, v1.ConditionForeignInstanceIgnored); c != nil && c.ObservedGeneration == d.gen {
		if findCondition(d.st.Conditions, v1.ConditionForeignInstanceIgnored) == nil {
			d.st.Conditions = upsert(d.st.Conditions, *c)
		}
	}
}

type decider struct {
	in   Input
	prev v1.ProxyStatus
	gen  int64
	st   v1.ProxyStatus
	out  Decision
}

// invalid fails a Proxy whose spec makes no sense; nothing is created or deleted.
func (d *decider) invalid(err error) {
	d.st.Phase = v1.PhaseFailed
	d.st.IP = ""
	d.provisioned(metav1.ConditionFalse, ReasonInvalidSpec, err.Error())
	d.healthCondition(false)
}

func (d *decider) external() {
	d.st.ProviderID, d.st.SpecHash, d.st.FailureCount = "", "", 0
	if ep := d.in.Proxy.Spec.Endpoint; ep != nil {
		d.st.IP = ep.Host
	}
	d.provisioned(metav1.ConditionTrue, ReasonExternal, "tracked, not provisioned by the operator")
	if d.in.Finalizing {
		d.st.Phase = v1.PhaseDeleting
		d.healthCondition(false)
		d.out.Finalized = true
		return
	}
	d.st.Phase = d.healthPhase(v1.PhasePending)
	d.healthCondition(true)
	d.out.ResyncAfter = d.healthResync()
}

func (d *decider) syncManaged() {
	in := d.in
	spec := &in.Proxy.Spec
	if !in.ProviderKnown {
		d.st.Phase = v1.PhaseFailed
		d.provisioned(metav1.ConditionFalse, ReasonUnknownProvider, fmt.Sprintf("provider %q is not configured", spec.Provider))
		d.healthCondition(false)
		return
	}
	if d.waiting() {
		return
	}
	if in.Outcome != nil {
		d.settle(*in.Outcome)
		return
	}
	if in.ObserveErr != nil {
		d.providerError(in.ObserveErr, "observe")
		return
	}
	if in.CloudInitErr != nil {
		// Without the content there is no desired hash: keep whatever runs, create nothing.
		d.observeRunning(in.Instance, v1.PhasePending)
		d.provisioned(metav1.ConditionFalse, ReasonCloudInitError, in.CloudInitErr.Error())
		d.out.ResyncAfter = 0
		return
	}
	desired := SpecHash(spec, in.CloudInit)
	inst := in.Instance
	if inst == nil {
		if d.prev.Phase == v1.PhaseFailed && d.prev.SpecHash == desired && d.prevCreateRefused() {
			// Permanent failure: no retries until the spec (hence the hash) changes.
			d.keepProvisioned()
			d.healthCondition(false)
			return
		}
		if in.CredentialsPending {
			d.st.ProviderID, d.st.IP = "", ""
			if d.st.Phase == "" || d.st.Phase == v1.PhasePending {
				d.st.Phase = v1.PhasePending
			} else {
				d.st.Phase = v1.PhaseProvisioning
			}
			d.provisioned(metav1.ConditionFalse, ReasonAwaitingCredentials, "waiting for the credentials Secret to be stored before creating the instance")
			d.healthCondition(false)
			d.out.ResyncAfter = ProvisionPoll
			return
		}
		d.act(Action{Kind: ActionCreate, Create: d.createRequest(desired)})
		return
	}
	instHash := inst.SpecHash
	if instHash == "" {
		instHash = d.prev.SpecHash
	}
	// A machine that holds another credential than the stored one (rotated, or made before
	// credentials existed) is replaced. While a rotated credential is not stored yet, the
	// machine is kept rather than deleted with nothing to replace it.
	staleCredentials := in.CredentialsVersion != "" && !in.CredentialsPending && inst.CredentialsVersion != in.CredentialsVersion
	switch {
	case instHash != desired:
		d.st.ProviderID = inst.ID
		d.act(Action{Kind: ActionDelete, ProviderID: inst.ID})
	case inst.State == providers.StateStopped || inst.State == providers.StateTerminated, staleCredentials:
		d.st.ProviderID = inst.ID
		d.act(Action{Kind: ActionDelete, ProviderID: inst.ID})
	case inst.State == providers.StateProvisioning || inst.IP == "":
		d.st.ProviderID, d.st.SpecHash, d.st.IP = inst.ID, instHash, ""
		d.st.Phase = v1.PhaseProvisioning
		d.st.FailureCount = 0
		d.provisioned(metav1.ConditionFalse, ReasonCreating, "instance "+inst.ID+" is starting")
		d.healthCondition(false)
		d.out.ResyncAfter = ProvisionPoll
	case d.awaitingFirstVerdict(inst, instHash):
		// The previous answer stands (no status write) until the prober's first verdict.
		d.st = d.prev
		d.st.Conditions = slices.Clone(d.prev.Conditions)
		d.st.ObservedGeneration = d.gen
		d.out.ProbeIP = inst.IP
		d.out.ResyncAfter = ProvisionPoll
	default:
		d.st.SpecHash = instHash
		d.st.FailureCount = 0
		d.observeRunning(inst, v1.PhaseProvisioning)
		d.out.ResyncAfter = d.healthResync()
	}
}

// awaitingFirstVerdict: the instance this status reports as starting now runs, and the
// prober has no verdict on it yet. Writing "Provisioning, running at IP, awaiting probe" now
// and Ready one probe later costs Metacontroller a status write (about 3 API calls) per
// proxy that the user gains little from: the proxy is not leasable before its verdict
// either way.
func (d *decider) awaitingFirstVerdict(inst *providers.Instance, instHash string) bool {
	h := d.in.Health.State
	return (h == verdict.Unknown || h == "") && inst.State == providers.StateRunning && inst.IP != "" &&
		d.prev.Phase == v1.PhaseProvisioning && d.prev.IP == "" && d.prev.ProviderID == inst.ID &&
		d.prev.SpecHash == instHash && d.prevReason() == ReasonCreating
}

// observeRunning records a running instance (if any) and the health-derived phase.
func (d *decider) observeRunning(inst *providers.Instance, fallback v1.ProxyPhase) {
	if inst == nil || inst.State != providers.StateRunning || inst.IP == "" {
		d.st.Phase = fallback
		d.st.IP = ""
		if inst != nil {
			d.st.ProviderID = inst.ID
		}
		d.healthCondition(false)
		return
	}
	d.st.ProviderID, d.st.IP = inst.ID, inst.IP
	d.provisioned(metav1.ConditionTrue, ReasonRunning, "instance "+inst.ID+" is running")
	d.st.Phase = d.healthPhase(v1.PhaseProvisioning)
	d.healthCondition(true)
}

// act records the first-pass action and the status that holds while it runs.
func (d *decider) act(a Action) {
	d.out.Action = &a
	switch a.Kind {
	case ActionCreate:
		d.st.Phase = v1.PhaseProvisioning
		d.st.IP = ""
		d.provisioned(metav1.ConditionFalse, ReasonCreating, "creating instance "+a.Create.Name)
	case ActionDelete:
		d.st.Phase = v1.PhaseProvisioning
		if d.in.Finalizing {
			d.st.Phase = v1.PhaseDeleting
		}
		d.st.IP = ""
		d.provisioned(metav1.ConditionFalse, d.deleteReason(), "deleting instance "+a.ProviderID)
	}
	d.healthCondition(false)
}

func (d *decider) deleteReason() string {
	switch {
	case d.in.Finalizing:
		return ReasonDeleting
	case d.in.Instance != nil && (d.in.Instance.State == providers.StateStopped || d.in.Instance.State == providers.StateTerminated):
		return ReasonInstanceLost
	}
	return ReasonReplacing
}

// settle folds the action's outcome into the status of the second pass.
func (d *decider) settle(o Outcome) {
	d.out.Action = nil
	if o.Err != nil {
		if o.Action.Kind == ActionCreate {
			d.st.SpecHash = o.Action.Create.SpecHash
		}
		d.providerError(o.Err, string(o.Action.Kind))
		return
	}
	d.st.FailureCount = 0
	d.healthCondition(false)
	d.st.IP = ""
	switch o.Action.Kind {
	case ActionCreate:
		d.st.ProviderID, d.st.SpecHash = o.ProviderID, o.Action.Create.SpecHash
		d.st.Phase = v1.PhaseProvisioning
		d.provisioned(metav1.ConditionFalse, ReasonCreating, "instance "+o.ProviderID+" is starting")
		d.out.ResyncAfter = ProvisionPoll
	case ActionDelete:
		d.st.ProviderID = o.Action.ProviderID
		d.st.Phase = v1.PhaseProvisioning
		if d.in.Finalizing {
			d.st.Phase = v1.PhaseDeleting
		}
		d.provisioned(metav1.ConditionFalse, d.deleteReason(), "waiting for instance "+o.Action.ProviderID+" to be gone")
		d.out.ResyncAfter = DeletePoll
	}
}

// providerError records a failed provider call according to its class.
func (d *decider) providerError(err error, op string) {
	msg := op + ": " + err.Error()
	if d.st.ProviderID == "" && d.st.Phase != v1.PhaseFailed {
		d.st.Phase = v1.PhasePending
	}
	if d.in.Finalizing {
		d.st.Phase = v1.PhaseDeleting
	}
	switch {
	case errors.Is(err, providers.ErrQuotaExceeded):
		d.provisioned(metav1.ConditionFalse, ReasonQuotaExceeded, msg)
		d.out.ResyncAfter = QuotaResync
	case errors.Is(err, providers.ErrPermanent) && !d.in.Finalizing:
		d.st.Phase = v1.PhaseFailed
		d.st.IP = ""
		d.st.FailureCount = 0
		d.provisioned(metav1.ConditionFalse, ReasonPermanentError, msg)
		d.out.ResyncAfter = 0
	case errors.Is(err, providers.ErrPermanent):
		// A deletion must still happen: keep asking, slowly, and say why.
		d.provisioned(metav1.ConditionFalse, ReasonPermanentError, msg)
		d.out.ResyncAfter = BlockedResync
	default:
		d.st.FailureCount++
		status := metav1.ConditionFalse
		if d.st.ProviderID != "" {
			status = metav1.ConditionUnknown
		}
		d.provisioned(status, ReasonTransientError, msg)
		d.out.ResyncAfter = Backoff(d.st.FailureCount)
	}
	if d.out.ResyncAfter > 0 {
		d.out.RetryAt = d.in.Now.Add(d.out.ResyncAfter)
	}
	if d.in.Finalizing || d.st.Phase == v1.PhaseFailed {
		// A proxy being deleted or failed has no address to probe (IP is cleared): a kept
		// "Healthy True" would contradict its phase.
		d.healthCondition(false)
		return
	}
	d.keepHealthCondition()
}

// waiting carries the previous status over unchanged while a provider error's wait runs.
func (d *decider) waiting() bool {
	if !d.in.RetryAt.After(d.in.Now) || d.in.Outcome != nil {
		return false
	}
	d.st.Conditions = append([]metav1.Condition(nil), d.prev.Conditions...)
	d.out.ResyncAfter = d.in.RetryAt.Sub(d.in.Now)
	d.out.RetryAt = d.in.RetryAt
	return true
}

func (d *decider) finalizeManaged() {
	in := d.in
	d.st.Phase = v1.PhaseDeleting
	d.st.IP = ""
	d.healthCondition(false)
	if !in.ProviderKnown {
		if d.st.ProviderID == "" && in.Instance == nil {
			d.provisioned(metav1.ConditionFalse, ReasonUnknownProvider, fmt.Sprintf("provider %q is not configured; nothing was created", in.Proxy.Spec.Provider))
			d.out.Finalized = true
			return
		}
		d.provisioned(metav1.ConditionFalse, ReasonUnknownProvider,
			fmt.Sprintf("provider %q is not configured: cannot delete instance %s; configure it again or remove the finalizer by hand", in.Proxy.Spec.Provider, d.st.ProviderID))
		d.out.ResyncAfter = BlockedResync
		return
	}
	if d.waiting() {
		return
	}
	if in.Outcome != nil {
		d.settle(*in.Outcome)
		return
	}
	if in.ObserveErr != nil {
		d.providerError(in.ObserveErr, "observe")
		return
	}
	if in.Instance == nil {
		d.st.ProviderID = ""
		d.provisioned(metav1.ConditionFalse, ReasonDeleting, "instance deleted")
		d.out.Finalized = true
		return
	}
	d.st.ProviderID = in.Instance.ID
	d.act(Action{Kind: ActionDelete, ProviderID: in.Instance.ID})
}

func (d *decider) createRequest(hash string) providers.CreateRequest {
	req := newCreateRequest(d.in.Proxy, hash, d.in.CloudInit)
	if c := d.in.Credentials; c != nil {
		cp := *c
		req.Credentials, req.CredentialsVersion = &cp, d.in.CredentialsVersion
	}
	return req
}

// CreateRequest is the request Decide makes to create p's machine with that cloud-init (spec
// defaulted), so the hook can ask a provider about it before observing.
func CreateRequest(p *v1.Proxy, cloudInit string) providers.CreateRequest {
	return newCreateRequest(p, SpecHash(&p.Spec, cloudInit), cloudInit)
}

func newCreateRequest(p *v1.Proxy, hash, cloudInit string) providers.CreateRequest {
	req := providers.CreateRequest{
		Name:      providers.InstanceName(string(p.UID), hash),
		OwnerUID:  string(p.UID),
		SpecHash:  hash,
		Namespace: p.Namespace,
		ProxyName: p.Name,
		Port:      p.Spec.Port,
		CloudInit: cloudInit,
	}
	if pl := p.Spec.Placement; pl != nil {
		req.Region, req.Zone, req.MachineType, req.Image = pl.Region, pl.Zone, pl.MachineType, pl.Image
	}
	return req
}

// healthPhase maps the prober's verdict onto Ready/Unhealthy, or unknown onto fallback.
func (d *decider) healthPhase(unknown v1.ProxyPhase) v1.ProxyPhase {
	switch d.in.Health.State {
	case verdict.Healthy:
		return v1.PhaseReady
	case verdict.Unhealthy:
		return v1.PhaseUnhealthy
	}
	return unknown
}

func (d *decider) healthResync() time.Duration {
	if d.in.HealthResync > 0 {
		return d.in.HealthResync
	}
	return DefaultHealthResync
}

// healthCondition writes the Healthy condition. When probed is false the proxy is not
// probeable (no running instance) and health is Unknown.
func (d *decider) healthCondition(probed bool) {
	h := d.in.Health
	if !probed || h.State == verdict.Unknown || h.State == "" {
		reason, msg := ReasonAwaitingInstance, "no running instance to probe"
		if probed {
			reason, msg = ReasonAwaitingProbe, "no probe verdict yet"
		} else {
			// The last probe's time, latency, exit and grade belong to a machine that no
			// longer serves.
			d.st.LastHealthCheckTime, d.st.LatencyMillis = nil, 0
			d.st.Exit, d.st.QualityBand = nil, ""
		}
		d.setCondition(v1.ConditionHealthy, metav1.ConditionUnknown, reason, msg)
		return
	}
	if !h.Since.IsZero() {
		t := metav1.NewTime(h.Since.UTC().Truncate(time.Second))
		d.st.LastHealthCheckTime = &t
	}
	// Latency is recorded only with a health transition (decision 0170): probe latencies on a
	// busy machine jitter by 10x, and any rule that follows them writes a steady fleet's
	// status forever. The live value is in the discovery API and the probe metrics.
	if d.healthTransition(h.State) {
		d.st.LatencyMillis = h.LatencyMillis
	}
	if h.Exit.IP != "" {
		d.st.Exit = &v1.ExitStatus{IP: h.Exit.IP, Country: h.Exit.Country, ASN: int64(h.Exit.ASN)}
	}
	if h.Band != "" {
		d.st.QualityBand = h.Band
	}
	if h.State == verdict.Healthy {
		d.setCondition(v1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "probe through the proxy succeeded")
		return
	}
	msg := "probe through the proxy failed"
	if h.Reason != "" {
		msg += ": " + h.Reason
	}
	d.setCondition(v1.ConditionHealthy, metav1.ConditionFalse, ReasonProbeFailed, msg)
}

// exitCondition writes ExitVerified from the prober's exit check, or carries the previous one
// over while the status still shows that exit; without an exit in status there is none.
func (d *decider) exitCondition() {
	if d.st.Exit == nil {
		return
	}
	h := d.in.Health.Exit
	if h.IP == "" || h.IP != d.st.Exit.IP {
		if c := findCondition(d.prev.Conditions, v1.ConditionExitVerified); c != nil {
			d.st.Conditions = upsert(d.st.Conditions, *c)
		}
		return
	}
	if h.Mismatch != "" {
		d.setCondition(v1.ConditionExitVerified, metav1.ConditionFalse, ReasonExitMismatch, h.Mismatch)
		return
	}
	d.setCondition(v1.ConditionExitVerified, metav1.ConditionTrue, ReasonExitVerified, "exit "+describeExit(h)+" passes the checks")
}

func describeExit(e verdict.Exit) string {
	s := e.IP
	var parts []string
	if e.Country != "" {
		parts = append(parts, e.Country)
	}
	if e.ASN != 0 {
		parts = append(parts, fmt.Sprintf("AS%d", e.ASN))
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// healthTransition says the Healthy condition this sync writes for state differs from the one
// status holds (or status holds none yet): only then is the verdict's latency recorded.
func (d *decider) healthTransition(state verdict.State) bool {
	want := metav1.ConditionFalse
	if state == verdict.Healthy {
		want = metav1.ConditionTrue
	}
	c := findCondition(d.prev.Conditions, v1.ConditionHealthy)
	return c == nil || c.Status != want
}

// keepHealthCondition carries the previous Healthy condition over unchanged.
func (d *decider) keepHealthCondition() {
	if c := findCondition(d.prev.Conditions, v1.ConditionHealthy); c != nil {
		d.st.Conditions = upsert(d.st.Conditions, *c)
		return
	}
	d.healthCondition(false)
}

func (d *decider) keepProvisioned() {
	if c := findCondition(d.prev.Conditions, v1.ConditionProvisioned); c != nil {
		d.st.Conditions = upsert(d.st.Conditions, *c)
	}
}

func (d *decider) prevReason() string {
	if c := findCondition(d.prev.Conditions, v1.ConditionProvisioned); c != nil {
		return c.Reason
	}
	return ""
}

// prevCreateRefused says the status records a Create the provider refused as permanent. Only
// that holds a Proxy in Failed until its spec changes: a permanent error from an observation
// (a Get, a lookup by tags) says nothing about the spec, so the next sync simply asks again.
// The status is the decision's only memory; the message names the operation that failed.
func (d *decider) prevCreateRefused() bool {
	c := findCondition(d.prev.Conditions, v1.ConditionProvisioned)
	return c != nil && c.Reason == ReasonPermanentError && strings.HasPrefix(c.Message, string(ActionCreate)+": ")
}

func (d *decider) provisioned(status metav1.ConditionStatus, reason, msg string) {
	d.setCondition(v1.ConditionProvisioned, status, reason, msg)
}

// setCondition keeps the previous transition time while the condition's status is unchanged,
// so re-syncing a steady proxy yields the same bytes.
func (d *decider) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	c := metav1.Condition{
		Type:               typ,
		Status:             status,
		ObservedGeneration: d.gen,
		Reason:             reason,
		Message:            msg,
		LastTransitionTime: metav1.NewTime(d.in.Now.UTC().Truncate(time.Second)),
	}
	if old := findCondition(d.prev.Conditions, typ); old != nil && old.Status == status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	d.st.Conditions = upsert(d.st.Conditions, c)
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// conditionOrder is the order conditions appear in, whatever order they were set in, so the
// same status is always the same bytes.
var conditionOrder = map[string]int{
	v1.ConditionProvisioned:  0,
	v1.ConditionHealthy:      1,
	v1.ConditionExitVerified: 2,
	v1.ConditionReady:        3,
	v1.ConditionStalled:      4,
}

// upsert replaces c, or inserts it at its place in conditionOrder.
func upsert(cs []metav1.Condition, c metav1.Condition) []metav1.Condition {
	for i := range cs {
		if cs[i].Type == c.Type {
			cs[i] = c
			return cs
		}
	}
	rank := func(typ string) int {
		if r, ok := conditionOrder[typ]; ok {
			return r
		}
		return len(conditionOrder)
	}
	i := len(cs)
	for i > 0 && rank(cs[i-1].Type) > rank(c.Type) {
		i--
	}
	return slices.Insert(cs, i, c)
}

// readiness derives Ready, and Stalled, from the phase and the other conditions once the rest
// of the status is decided. Ready is True iff the phase is Ready; otherwise its reason and
// message are those of what holds the proxy back: the Provisioned condition if it is not True,
// else the Healthy one. Stalled is present only while the phase is Failed. Both keep their
// transition time while their status holds, like every condition here.
func (d *decider) readiness() {
	d.st.Conditions = slices.DeleteFunc(d.st.Conditions, func(c metav1.Condition) bool {
		return c.Type == v1.ConditionReady || c.Type == v1.ConditionStalled
	})
	if d.st.Phase == v1.PhaseReady {
		d.setCondition(v1.ConditionReady, metav1.ConditionTrue, ReasonProbeSucceeded, "the proxy is running and the probe through it succeeded")
		return
	}
	reason, msg := d.heldBackBy()
	d.setCondition(v1.ConditionReady, metav1.ConditionFalse, reason, msg)
	if d.st.Phase == v1.PhaseFailed {
		d.setCondition(v1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	}
}

// heldBackBy names what keeps a proxy that is not Ready from being Ready.
func (d *decider) heldBackBy() (reason, msg string) {
	if d.st.Phase == v1.PhaseDeleting {
		return ReasonDeleting, "the proxy is being deleted"
	}
	for _, typ := range []string{v1.ConditionProvisioned, v1.ConditionHealthy} {
		if c := findCondition(d.st.Conditions, typ); c != nil && c.Status != metav1.ConditionTrue {
			return c.Reason, c.Message
		}
	}
	// Not reached by any status Decide writes today; a phase is always a valid reason.
	return string(d.st.Phase), "phase " + string(d.st.Phase)
}

// RecordedHealth reads back the health a status last recorded, so a restarted prober can start
// from it instead of from Unknown.
func RecordedHealth(st v1.ProxyStatus) verdict.Health {
	h := verdict.Health{State: verdict.Unknown, LatencyMillis: st.LatencyMillis}
	if st.LastHealthCheckTime != nil {
		h.Since = st.LastHealthCheckTime.Time
	}
	if c := findCondition(st.Conditions, v1.ConditionHealthy); c != nil {
		switch c.Status {
		case metav1.ConditionTrue:
			h.State = verdict.Healthy
		case metav1.ConditionFalse:
			h.State = verdict.Unhealthy
		}
	}
	if e := st.Exit; e != nil {
		h.Exit = verdict.Exit{IP: e.IP, Country: e.Country, ASN: uint32(max(e.ASN, 0))}
		if c := findCondition(st.Conditions, v1.ConditionExitVerified); c != nil && c.Status == metav1.ConditionFalse {
			h.Exit.Mismatch = c.Message
		}
	}
	h.Band = st.QualityBand
	return h
}
