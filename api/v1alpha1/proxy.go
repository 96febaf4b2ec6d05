package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProvisioningMode says who owns a proxy's machine.
// +kubebuilder:validation:Enum=Managed;External
type ProvisioningMode string

const (
	// ModeManaged proxies are created and deleted by a configured provider.
	ModeManaged ProvisioningMode = "Managed"
	// ModeExternal proxies exist elsewhere; the operator only tracks and probes them.
	ModeExternal ProvisioningMode = "External"
)

// ProxyPhase is the one-word summary shown by `kubectl get px`.
type ProxyPhase string

const (
	PhasePending      ProxyPhase = "Pending"
	PhaseProvisioning ProxyPhase = "Provisioning"
	PhaseReady        ProxyPhase = "Ready"
	PhaseUnhealthy    ProxyPhase = "Unhealthy"
	PhaseDeleting     ProxyPhase = "Deleting"
	PhaseFailed       ProxyPhase = "Failed"
)

// Condition types.
const (
	ConditionProvisioned = "Provisioned"
	ConditionHealthy     = "Healthy"
	// ConditionReady is True iff the phase is Ready; when False its reason says what holds the
	// proxy back. GitOps tools read it: kstatus (Flux) computes Current from Ready True and
	// InProgress from Ready False.
	ConditionReady = "Ready"
	// ConditionStalled is present, True, only while the phase is Failed (a state that needs a
	// spec change or a human): kstatus computes Failed from it.
	ConditionStalled = "Stalled"
	// ConditionForeignInstanceIgnored is True when status.providerID named an instance
	// another Proxy owns: the operator ignored it (neither read nor deleted it).
	ConditionForeignInstanceIgnored = "ForeignInstanceIgnored"
	// ConditionExitVerified is present once an exit check ran: True when the exit passes
	// spec.verify (and, for a Managed proxy, is its own IP), False with the mismatch.
	ConditionExitVerified = "ExitVerified"
)

// Defaults applied by the CRD schema and, for bodies that bypass the API server, by Default.
const (
	DefaultPort             int32 = 3128
	DefaultMaxLeases        int32 = 5
	DefaultProbeURL               = "https://www.gstatic.com/generate_204"
	DefaultIntervalSeconds  int32 = 30
	DefaultTimeoutSeconds   int32 = 5
	DefaultFailureThreshold int32 = 3
	DefaultSuccessThreshold int32 = 1
)

// Bounds on what one Proxy may ask of the operator: the CRD schema says the same, and Validate
// repeats it for bodies that skipped the API server (decision 0121).
const (
	// MaxAttributes is how many selection attributes a Proxy may carry.
	MaxAttributes = 32
	// MaxAttributeKeyLength is the longest attribute name (a label name's length).
	MaxAttributeKeyLength = 63
	// MaxAttributeValueLength is the longest attribute value.
	MaxAttributeValueLength = 256
	// MaxMaxLeases is the largest maxLeases: leases are held in memory, and one proxy serving
	// more than this many crawlers at once is not a proxy a site leaves alone.
	MaxMaxLeases int32 = 1000
)

// DefaultExpectedStatusCodes are the probe answers counted as success.
var DefaultExpectedStatusCodes = []int32{200, 204}

// Proxy is one HTTP egress proxy: a machine the operator provisions (Managed) or merely
// tracks (External), probed through itself and handed out to crawlers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=px,categories=crawl
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Exit",type=string,JSONPath=`.status.exit.ip`,priority=1
// +kubebuilder:printcolumn:name="Country",type=string,JSONPath=`.status.exit.country`,priority=1
// +kubebuilder:printcolumn:name="Band",type=string,JSONPath=`.status.qualityBand`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec.mode == oldSelf.spec.mode",message="mode is immutable",fieldPath=".spec.mode"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.provider) || !has(oldSelf.spec.provider) || self.spec.provider == oldSelf.spec.provider",message="provider is immutable",fieldPath=".spec.provider"
type Proxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxySpec   `json:"spec"`
	Status ProxyStatus `json:"status,omitempty"`
}

// ProxyList is a list of Proxies.
//
// +kubebuilder:object:root=true
type ProxyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Proxy `json:"items"`
}

// ProxySpec is what the user asks for.
//
// +kubebuilder:validation:XValidation:rule="(self.mode == 'Managed') == (has(self.provider) && size(self.provider) > 0)",message="provider is required when mode is Managed and must be empty when mode is External"
// +kubebuilder:validation:XValidation:rule="(self.mode == 'External') == has(self.endpoint)",message="endpoint is required when mode is External and must be absent when mode is Managed"
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecretRef) || self.mode == 'External'",message="credentialsSecretRef is only for External proxies: a Managed proxy gets a generated credential"
// +kubebuilder:validation:XValidation:rule="!has(self.vendor) || (self.mode == 'External' && has(self.credentialsSecretRef))",message="vendor is only for External proxies with a credentialsSecretRef (the vendor account)"
type ProxySpec struct {
	// Mode is Managed (the operator creates the machine) or External (the machine exists
	// elsewhere; the operator only tracks and probes it). Immutable on a Proxy (the rule sits
	// on Proxy, not here, so a ProxyPool's template may change it).
	Mode ProvisioningMode `json:"mode"`

	// Provider names an entry of the providers config ("mock", "gcp-eu", ...).
	// Required iff mode is Managed. Immutable on a Proxy (see Mode).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Provider string `json:"provider,omitempty"`

	// Placement says where and how big; providers ignore fields that do not apply.
	// Changing it on a Managed proxy replaces the machine.
	// +optional
	Placement *PlacementSpec `json:"placement,omitempty"`

	// CloudInit is the user-data passed to the machine, inline or from a Secret key.
	// Changing it (or the Secret's content) on a Managed proxy replaces the machine.
	// +optional
	CloudInit *CloudInitSpec `json:"cloudInit,omitempty"`

	// Endpoint is where an External proxy listens. Required iff mode is External.
	// +optional
	Endpoint *EndpointSpec `json:"endpoint,omitempty"`

	// CredentialsSecretRef names a Secret in the Proxy's namespace whose `username` and
	// `password` keys are the credential the External proxy demands (HTTP Basic proxy auth).
	// Probes use it, and a lease hands it to the crawler. External only: a Managed proxy gets
	// a generated credential in a Secret the operator owns.
	// +optional
	CredentialsSecretRef *SecretRef `json:"credentialsSecretRef,omitempty"`

	// Port is the port a Managed proxy listens on once its machine is up.
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Attributes are the selection attributes crawlers filter on (geo, asn, purpose...).
	// They are deliberately apart from the object's labels.
	// Names are at most 63 characters, values at most 256.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) >= 1 && size(k) <= 63 && size(self[k]) <= 256)",message="attribute names are 1-63 characters and values at most 256"
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`

	// HealthCheck configures the probe made through the proxy.
	// +kubebuilder:default={}
	// +optional
	HealthCheck *HealthCheckSpec `json:"healthCheck,omitempty"`

	// MaxLeases is how many leases may be held on this proxy at once; 0 lists it but never leases it.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxLeases *int32 `json:"maxLeases,omitempty"`

	// Verify says what the exit check must find (exit address, country, network) for the
	// proxy to be leased.
	// +optional
	Verify *VerifySpec `json:"verify,omitempty"`

	// Vendor makes an External proxy a vendor's gateway: a source of sticky exits, one per
	// gateway session, served through the gateway only (decision 0293).
	// +optional
	Vendor *VendorSpec `json:"vendor,omitempty"`
}

// PlacementSpec is a small typed set of placement settings.
type PlacementSpec struct {
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Region string `json:"region,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Zone string `json:"zone,omitempty"`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	MachineType string `json:"machineType,omitempty"`
	// Image is a machine image (GCP) or a container image (kubernetes provider).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
}

// CloudInitSpec holds user-data inline or names a Secret key that holds it. Exactly one.
//
// +kubebuilder:validation:XValidation:rule="has(self.inline) != has(self.secretRef)",message="exactly one of inline or secretRef must be set"
type CloudInitSpec struct {
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	Inline *string `json:"inline,omitempty"`
	// SecretRef names a Secret in the Proxy's namespace; the Secret must carry the label
	// crawl.example.com/cloud-init: "true".
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`
}

// SecretKeyRef names one key of a Secret in the Proxy's namespace.
type SecretKeyRef struct {
	// Name is a Secret's name (a DNS subdomain: no '/', so it cannot name another namespace).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// SecretRef names a Secret in the Proxy's namespace.
type SecretRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// EndpointSpec is where an External proxy listens.
type EndpointSpec struct {
	// Host is an IP address or DNS name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)$`
	Host string `json:"host"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// HealthCheckSpec configures the probe: a GET of ProbeURL through the proxy.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || !has(self.intervalSeconds) || self.timeoutSeconds <= self.intervalSeconds",message="timeoutSeconds must not exceed intervalSeconds"
type HealthCheckSpec struct {
	// +kubebuilder:default="https://www.gstatic.com/generate_204"
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="probeURL must be an http:// or https:// URL"
	// +optional
	ProbeURL string `json:"probeURL,omitempty"`
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// +kubebuilder:default={200,204}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=100
	// +kubebuilder:validation:items:Maximum=599
	// +listType=set
	// +optional
	ExpectedStatusCodes []int32 `json:"expectedStatusCodes,omitempty"`
}

// ProxyStatus is what the operator observed. Every field is a pure function of the
// operator's inputs, so an unchanged fleet re-synced any number of times yields the same bytes.
type ProxyStatus struct {
	// ObservedGeneration is set by Metacontroller after each sync; declared so it is not pruned.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Unhealthy;Deleting;Failed
	// +optional
	Phase ProxyPhase `json:"phase,omitempty"`
	// ProviderID is the provider's opaque ID of the current machine.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// IP is where the proxy answers (for External proxies, spec.endpoint.host).
	// +optional
	IP string `json:"ip,omitempty"`
	// SpecHash is the hash of the spec (placement, cloud-init content, image, port) the
	// current machine was created from; a different desired hash replaces the machine.
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// FailureCount counts consecutive transient provider failures; it drives the backoff.
	// +optional
	FailureCount int32 `json:"failureCount,omitempty"`
	// Conditions are Provisioned, Healthy and Ready, and Stalled while the phase is Failed.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastHealthCheckTime is the time of the probe that last changed status, not of the latest probe.
	// +optional
	LastHealthCheckTime *metav1.Time `json:"lastHealthCheckTime,omitempty"`
	// LatencyMillis is the probe latency of the verdict that last changed the Healthy
	// condition, written only with that transition (decision 0170); the live value is in
	// the discovery API and the probe metrics.
	// +optional
	LatencyMillis int64 `json:"latencyMillis,omitempty"`
	// Exit is what the latest exit check learned; rewritten only when it changes.
	// +optional
	Exit *ExitStatus `json:"exit,omitempty"`
	// QualityBand grades how the proxy has fared lately (probes, crawler reports); rewritten
	// only when the band changes.
	// +optional
	QualityBand QualityBand `json:"qualityBand,omitempty"`
}

// Key is the proxy's namespace/name, its ID in the discovery API.
func (p *Proxy) Key() string { return p.Namespace + "/" + p.Name }

// VerifySpec says what the exit check must find for the proxy to be leased: the address
// the far side sees, and its country and network from the operator's MaxMind-format
// databases.
type VerifySpec struct {
	// ExitURL answers the caller's address as text or JSON ({"ip": ...}); the probe fetches
	// it through the proxy. Empty: the operator's -exit-url (no exit check when that is empty
	// too).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="exitURL must be an http:// or https:// URL"
	// +optional
	ExitURL string `json:"exitURL,omitempty"`
	// ExpectedExit are the addresses or CIDRs the exit must fall in. Empty: a Managed proxy's
	// exit must be its own IP; an External proxy's exit is not checked.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=set
	// +optional
	ExpectedExit []string `json:"expectedExit,omitempty"`
	// CountryAttribute names the attribute (e.g. "geo") whose value is the ISO 3166 country
	// code the exit must be in (case-insensitive). Unset: the country is not checked.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	CountryAttribute string `json:"countryAttribute,omitempty"`
	// ASNAttribute names the attribute (e.g. "asn") whose value is the autonomous system
	// ("AS15169" or "15169") the exit must be in. Unset: the network is not checked.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ASNAttribute string `json:"asnAttribute,omitempty"`
	// OnMismatch is what a failed check does: Exclude (default) keeps the proxy from new
	// leases; Report only sets the ExitVerified condition.
	// +kubebuilder:validation:Enum=Exclude;Report
	// +optional
	OnMismatch MismatchAction `json:"onMismatch,omitempty"`
}

// MismatchAction is what a failed exit check does.
type MismatchAction string

const (
	MismatchExclude MismatchAction = "Exclude"
	MismatchReport  MismatchAction = "Report"
)

// Excludes reports whether a failed check keeps the proxy from new leases.
func (v *VerifySpec) Excludes() bool { return v == nil || v.OnMismatch != MismatchReport }

// ExitStatus is what the exit check last learned. Each field changes only when the exit
// does (or the databases say something else about it), never with probe timing.
type ExitStatus struct {
	// IP is the address a target sees connections through the proxy come from.
	IP string `json:"ip,omitempty"`
	// Country is the ISO 3166 code the country database gives for IP ("" when unknown).
	// +optional
	Country string `json:"country,omitempty"`
	// ASN is the autonomous system the ASN database gives for IP (0 when unknown).
	// +optional
	ASN int64 `json:"asn,omitempty"`
}

// QualityBand is a coarse grade of how a proxy has fared lately (decision 0142).
// +kubebuilder:validation:Enum=Good;Fair;Poor
type QualityBand string

const (
	BandGood QualityBand = "Good"
	BandFair QualityBand = "Fair"
	BandPoor QualityBand = "Poor"
)

// BandRank orders bands, better higher: Good 3, Fair 2, Poor 1, none 0.
func BandRank(b QualityBand) int {
	switch b {
	case BandGood:
		return 3
	case BandFair:
		return 2
	case BandPoor:
		return 1
	}
	return 0
}
