package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PoolKind is the kind of a ProxyPool.
const PoolKind = "ProxyPool"

// PoolResource is the plural resource name of ProxyPools.
const PoolResource = "proxypools"

// Labels, annotations and the attribute that tie a member Proxy to its pool. The pool sets
// them on the Proxies it creates; the Proxy's own sync reads PoolDrainingLabel into the fleet
// view, so the lease store stops granting leases on a draining member.
const (
	// PoolLabel (on members) is the owning pool's name; status.selector selects on it.
	PoolLabel = Group + "/pool"
	// PoolAttribute (in members' spec.attributes) is the pool's name, so crawlers can lease
	// from one pool with the selector {"pool": NAME}.
	PoolAttribute = "pool"
	// PoolDrainingLabel is "true" on a member being removed: listed, never leased.
	PoolDrainingLabel = Group + "/draining"
	// PoolDrainingSinceAnnotation is when the member started draining (RFC 3339).
	PoolDrainingSinceAnnotation = Group + "/draining-since"
	// PoolDrainReasonAnnotation says why it drains (see pool.Reason*).
	PoolDrainReasonAnnotation = Group + "/drain-reason"
	// PoolTemplateHashAnnotation is the hash of the pool template the member was made from.
	PoolTemplateHashAnnotation = Group + "/template-hash"
	// PoolOrdinalAnnotation is the member's creation ordinal within the pool.
	PoolOrdinalAnnotation = Group + "/ordinal"
)

// Pool condition types. Ready, Progressing and ScalingLimited are the pool's own; Reconciling
// mirrors Progressing under the name kstatus (sigs.k8s.io/cli-utils/pkg/kstatus) reads, so
// `kubectl wait`-style tools and Flux/Config Sync see a rollout as in progress.
const (
	PoolConditionReady          = "Ready"
	PoolConditionProgressing    = "Progressing"
	PoolConditionScalingLimited = "ScalingLimited"
	PoolConditionReconciling    = "Reconciling"
)

// Pool defaults, applied by the CRD schema and by (*ProxyPoolSpec).Default.
const (
	DefaultPoolMaxSurge                  = 1
	DefaultPoolMaxUnavailable            = 0
	DefaultPoolDrainSeconds        int32 = 300
	DefaultTargetLeaseUtilization  int32 = 70
	DefaultScaleDownStabilization  int32 = 300
	DefaultPoolReplicas            int32 = 1
	MaxPoolNameLength                    = 50
	MaxPoolReplicas                int32 = 1000
	DefaultPoolAutoscaleMaxReplica int32 = 10
)

// ProxyPool keeps a number of Proxies of one kind alive, rotates them without a capacity
// gap and, optionally, scales them with lease demand. Its members are ordinary Proxies,
// created and deleted through Metacontroller as the pool's children.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=pxp,categories=crawl
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyReplicas`
// +kubebuilder:printcolumn:name="Leases",type=integer,JSONPath=`.status.activeLeases`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters (member names add 6)"
type ProxyPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyPoolSpec   `json:"spec"`
	Status ProxyPoolStatus `json:"status,omitempty"`
}

// ProxyPoolList is a list of ProxyPools.
//
// +kubebuilder:object:root=true
type ProxyPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyPool `json:"items"`
}

// ProxyPoolSpec is what the user asks of a pool.
//
// +kubebuilder:validation:XValidation:rule="!has(self.autoscale) || !has(self.autoscale.minReplicas) || !has(self.autoscale.maxReplicas) || self.autoscale.minReplicas <= self.autoscale.maxReplicas",message="autoscale.minReplicas must not exceed autoscale.maxReplicas"
type ProxyPoolSpec struct {
	// Replicas is how many members the pool keeps (without autoscale). `kubectl scale` and
	// an HPA set it through the scale subresource; with autoscale set it is ignored.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Template is what every member is made from. Changing it rolls the pool: new members
	// first (up to maxSurge), old ones drained once the new are healthy.
	Template ProxyTemplate `json:"template"`

	// Strategy bounds a rollout or rotation.
	// +kubebuilder:default={}
	// +optional
	Strategy *PoolStrategy `json:"strategy,omitempty"`

	// Rotation replaces members by age or by bans.
	// +optional
	Rotation *PoolRotation `json:"rotation,omitempty"`

	// DrainSeconds is how long a member being removed keeps its leases while taking no new
	// ones; it is removed sooner once its last lease ends.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	DrainSeconds *int32 `json:"drainSeconds,omitempty"`

	// Autoscale sizes the pool by lease demand. Leave it unset to let replicas (or an HPA
	// or KEDA through the scale subresource) decide.
	// +optional
	Autoscale *PoolAutoscale `json:"autoscale,omitempty"`
}

// ProxyTemplate is the part of a Proxy a pool stamps out.
type ProxyTemplate struct {
	// Metadata holds the labels and annotations every member carries.
	// +optional
	Metadata ProxyTemplateMeta `json:"metadata,omitempty"`
	// Spec is every member's Proxy spec. Its attributes gain pool: NAME.
	// +kubebuilder:validation:XValidation:rule="self.mode == 'Managed'",message="pool members must be Managed: an External proxy's address cannot be stamped out"
	Spec ProxySpec `json:"spec"`
}

// ProxyTemplateMeta is the metadata a template may set.
type ProxyTemplateMeta struct {
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PoolStrategy bounds how far a rollout may go above and below replicas.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.maxSurge) && has(self.maxUnavailable) && (self.maxSurge == 0 || self.maxSurge == '0%') && (self.maxUnavailable == 0 || self.maxUnavailable == '0%'))",message="maxSurge and maxUnavailable must not both be 0"
type PoolStrategy struct {
	// MaxSurge is how many members may exist above replicas while members are replaced
	// (draining members count): an absolute number or a percentage of replicas (rounded up).
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 1000 : self.matches('^[0-9]{1,3}%$')",message="maxSurge must be 0-1000 or a percentage like 25%"
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many of replicas may be unhealthy because of a replacement: an
	// absolute number or a percentage of replicas (rounded down).
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 1000 : self.matches('^[0-9]{1,3}%$')",message="maxUnavailable must be 0-1000 or a percentage like 25%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// PoolRotation replaces members for freshness.
type PoolRotation struct {
	// MaxAge replaces members older than this (Go duration, at least 1m), oldest first,
	// one surge at a time.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="maxAge must be at least 1m"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// BanThreshold replaces a member that is cooling down for at least this many distinct
	// targets at once (a burned IP), whatever its age.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	BanThreshold *int32 `json:"banThreshold,omitempty"`
	// MinBand replaces a member whose status.qualityBand is below it (Fair: Poor members go;
	// Good: Fair and Poor ones go), make-before-break like any rotation. A member without a
	// band yet is kept.
	// +kubebuilder:validation:Enum=Good;Fair
	// +optional
	MinBand QualityBand `json:"minBand,omitempty"`
}

// PoolAutoscale sizes the pool by lease demand.
type PoolAutoscale struct {
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`
	// TargetLeaseUtilization is the percentage of the members' lease capacity the pool aims
	// to have in use.
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetLeaseUtilization *int32 `json:"targetLeaseUtilization,omitempty"`
	// ScaleDownStabilizationSeconds is how long demand must stay low before the pool
	// shrinks; it shrinks to the largest size recommended during that time.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ScaleDownStabilizationSeconds *int32 `json:"scaleDownStabilizationSeconds,omitempty"`
}

// ProxyPoolStatus is what the pool controller observed and decided. Every field is a pure
// function of the hook's inputs.
type ProxyPoolStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// DesiredReplicas is the size the pool aims for (replicas, or autoscale's choice).
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// Replicas is the number of members that are not draining (the scale subresource's
	// current count).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Members counts every member Proxy, draining and finalizing ones included.
	// +optional
	Members int32 `json:"members,omitempty"`
	// ReadyReplicas have a running machine (Provisioned=True).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// HealthyReplicas pass their probe (Healthy=True) and take leases.
	// +optional
	HealthyReplicas int32 `json:"healthyReplicas,omitempty"`
	// UpdatedReplicas were made from the current template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// DrainingReplicas are being removed: listed, never leased.
	// +optional
	DrainingReplicas int32 `json:"drainingReplicas,omitempty"`
	// ActiveLeases is the number of live leases on members.
	// +optional
	ActiveLeases int32 `json:"activeLeases,omitempty"`
	// LeaseCapacity is the sum of maxLeases over healthy, non-draining members.
	// +optional
	LeaseCapacity int32 `json:"leaseCapacity,omitempty"`
	// UtilizationPercent is activeLeases / leaseCapacity in percent (0 without capacity).
	// +optional
	UtilizationPercent int32 `json:"utilizationPercent,omitempty"`
	// Selector selects the members, for the scale subresource (HPA, KEDA).
	// +optional
	Selector string `json:"selector,omitempty"`
	// TemplateHash is the hash of the current template; members carrying another are outdated.
	// +optional
	TemplateHash string `json:"templateHash,omitempty"`
	// Autoscale is the autoscaler's memory between syncs.
	// +optional
	Autoscale *PoolAutoscaleStatus `json:"autoscale,omitempty"`
	// Conditions are Ready, Progressing, ScalingLimited and Reconciling.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolAutoscaleStatus is what the autoscaler remembers between syncs.
type PoolAutoscaleStatus struct {
	// Recommendation is the size the latest demand asked for.
	// +optional
	Recommendation int32 `json:"recommendation,omitempty"`
	// LowSince is when demand first asked for fewer members than desired; the pool shrinks
	// once it has stayed low for the stabilization window.
	// +optional
	LowSince *metav1.Time `json:"lowSince,omitempty"`
	// LowMax is the largest recommendation since LowSince: the size the pool shrinks to.
	// +optional
	LowMax int32 `json:"lowMax,omitempty"`
	// DeniedSeen is the discovery API's count of no-capacity answers for this pool at the
	// last sync; answers since then count as demand.
	// +optional
	DeniedSeen int64 `json:"deniedSeen,omitempty"`
	// LastScaleTime is when the desired size last changed.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
}

// Key is the pool's namespace/name.
func (p *ProxyPool) Key() string { return p.Namespace + "/" + p.Name }
