// Package kubernetes owns the in-cluster provider: a Managed proxy is a Squid Pod that
// Metacontroller creates and deletes as a child of the Proxy. It builds the desired Pod and
// reads observed Pods; it never talks to the API server, and it knows nothing of the sync core
// beyond the providers contract.
package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
)

// Defaults for Config fields left empty.
const (
	DefaultImage         = "ubuntu/squid"
	DefaultCPURequest    = "100m"
	DefaultMemoryRequest = "128Mi"
	DefaultMemoryLimit   = "256Mi"
	// CredentialsDir is where the Pod mounts its credentials Secret's htpasswd key.
	CredentialsDir = "/etc/proxy-credentials"
	// RunDir holds the generated squid.conf, the pid file and cache.log in the Pod.
	RunDir = "/tmp"
	// NCSAAuth is Squid's Basic-auth helper in Debian and Ubuntu Squid images.
	NCSAAuth          = "/usr/lib/squid/basic_ncsa_auth"
	credentialsVolume = "credentials"
)

// DeniedDestinations are the ranges every Pod's Squid refuses to reach, by the destination
// address it resolved (Squid's dst ACL), for plain requests and CONNECT alike (issue 30,
// decision 0251): unspecified, loopback, private, CGNAT, link-local (cloud metadata), the IETF
// block that holds Oracle's metadata, Azure's wire server, and IPv6 unique-local (AWS and GCP
// metadata over IPv6). In a cluster these hold every Service, Pod and node address unless the
// cluster uses public ranges: Config.DeniedCIDRs adds those.
var DeniedDestinations = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "168.63.129.16/32",
	"::/128", "::1/128", "fc00::/7", "fe80::/10",
}

// SquidConfig is the squid.conf of every Pod, with the htpasswd file under credentialsDir and
// run files under runDir. Every request must carry the Proxy's credential (Basic proxy
// auth); an authenticated client may go anywhere but DeniedDestinations and the extra ranges
// denied (the cluster's own, Config.DeniedCIDRs), refused with 403 before any allow.
// basic_ncsa_auth rereads the htpasswd file when its mtime changes, so a rotated Secret is
// picked up without a restart once the kubelet has updated the mount, and a credential
// verified once is trusted for credentialsttl only, so an old one stops working soon after.
func SquidConfig(port int32, credentialsDir, runDir string, denied ...string) string {
	// The extra ranges get an ACL of their own: a cluster range inside 10.0.0.0/8 in the same
	// ACL would be dropped with a warning at every start.
	extra := ""
	if len(denied) > 0 {
		extra = "acl denied_extra dst " + strings.Join(denied, " ") + "\nhttp_access deny denied_extra\n"
	}
	return fmt.Sprintf(`http_port %d
auth_param basic program %s %s/%s
auth_param basic children 5 startup=1 idle=1
auth_param basic realm proxy-operator
auth_param basic credentialsttl 60 seconds
acl authenticated proxy_auth REQUIRED
acl denied_dst dst %s
http_access deny !authenticated
http_access deny denied_dst
%shttp_access allow authenticated
http_access deny all
cache deny all
forwarded_for delete
via off
access_log none
cache_store_log none
cache_log %s/cache.log
pid_filename %s/squid.pid
coredump_dir %s
pinger_enable off
shutdown_lifetime 3 seconds
visible_hostname proxy-operator
`, port, NCSAAuth, credentialsDir, credentials.KeyHtpasswd, strings.Join(DeniedDestinations, " "), extra, runDir, runDir, runDir)
}

// PodTypeKey is how Metacontroller keys observed Pods in a sync request.
const PodTypeKey = "Pod.v1"

// Labels besides the GC tags, so `kubectl get pods -l app.kubernetes.io/managed-by=proxy-operator` works.
const (
	LabelName       = "app.kubernetes.io/name"
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	AnnotationProxy = "crawl.example.com/proxy"
	containerName   = "squid"
	portName        = "proxy"
	zoneNodeLabel   = "topology.kubernetes.io/zone"
)

// Config is the kubernetes entry of the providers config.
type Config struct {
	// Image is the default container image (placement.image overrides it); default ubuntu/squid.
	Image string `json:"image,omitempty"`
	// CPURequest and MemoryRequest are the container's requests (defaults 100m, 128Mi).
	CPURequest    string `json:"cpuRequest,omitempty"`
	MemoryRequest string `json:"memoryRequest,omitempty"`
	// CPULimit and MemoryLimit are the container's limits (defaults: none, 256Mi). A CPU limit
	// throttles a proxy under load, so none is set unless asked for.
	CPULimit    string `json:"cpuLimit,omitempty"`
	MemoryLimit string `json:"memoryLimit,omitempty"`
	// DeniedCIDRs are ranges the Pods' Squid refuses to reach besides DeniedDestinations: the
	// cluster's Service and Pod ranges when they are not private, or any other inside range.
	DeniedCIDRs []string `json:"deniedCIDRs,omitempty"`
}

// Validate names the field that does not parse as a Kubernetes quantity, or the deniedCIDRs
// entry that is not a CIDR.
func (c Config) Validate() error {
	if _, err := c.denied(); err != nil {
		return err
	}
	_, err := c.resources()
	return err
}

// denied is DeniedCIDRs, masked, as Squid's dst ACL reads them.
func (c Config) denied() ([]string, error) {
	var out []string
	for i, s := range c.DeniedCIDRs {
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: deniedCIDRs[%d] %q: want a CIDR such as 10.96.0.0/12", i, s)
		}
		out = append(out, pr.Masked().String())
	}
	return out, nil
}

func (c Config) resources() (corev1.ResourceRequirements, error) {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	fields := []struct {
		name, value string
		list        *corev1.ResourceList
		res         corev1.ResourceName
	}{
		{"cpuRequest", or(c.CPURequest, DefaultCPURequest), nil, corev1.ResourceCPU},
		{"memoryRequest", or(c.MemoryRequest, DefaultMemoryRequest), nil, corev1.ResourceMemory},
		{"cpuLimit", c.CPULimit, nil, corev1.ResourceCPU},
		{"memoryLimit", or(c.MemoryLimit, DefaultMemoryLimit), nil, corev1.ResourceMemory},
	}
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for i, f := range fields {
		if f.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil {
			return r, fmt.Errorf("kubernetes: %s %q: %w", f.name, f.value, err)
		}
		if i < 2 {
			r.Requests[f.res] = q
		} else {
			r.Limits[f.res] = q
		}
	}
	return r, nil
}

// Provider is the unbound kubernetes provider. On its own it can only say that it has nothing
// to list: its instances exist only through a sync (see Bind).
type Provider struct {
	cfg       Config
	image     string
	resources corev1.ResourceRequirements
	denied    []string
}

var (
	_ providers.Provider      = (*Provider)(nil)
	_ providers.ChildBinder   = (*Provider)(nil)
	_ providers.BoundProvider = (*bound)(nil)
)

// New validates cfg and returns the provider.
func New(cfg Config) (*Provider, error) {
	res, err := cfg.resources()
	if err != nil {
		return nil, err
	}
	denied, err := cfg.denied()
	if err != nil {
		return nil, err
	}
	img := cfg.Image
	if img == "" {
		img = DefaultImage
	}
	return &Provider{cfg: cfg, image: img, resources: res, denied: denied}, nil
}

// errUnbound is returned by calls made outside a sync: Pods are created and deleted only by
// Metacontroller acting on a sync answer.
var errUnbound = providers.Wrap(providers.ErrPermanent, "kubernetes", fmt.Errorf("pods are Metacontroller children: only a bound sync can act on them"))

// Create fails: see Bind.
func (p *Provider) Create(context.Context, providers.CreateRequest) (string, error) {
	return "", errUnbound
}

// Get fails: see Bind.
func (p *Provider) Get(context.Context, string) (*providers.Instance, error) { return nil, errUnbound }

// Delete fails: see Bind.
func (p *Provider) Delete(context.Context, string) error { return errUnbound }

// ListByTag returns nothing and no error: a Pod's ownerReference to its Proxy makes the
// Kubernetes garbage collector remove it with the Proxy, so orphan GC has nothing to do here.
func (p *Provider) ListByTag(context.Context) ([]providers.Instance, error) { return nil, nil }

// Bind scopes the provider to one sync of parent, over the Pods the request shows.
func (p *Provider) Bind(parent providers.Parent, observed map[string]map[string]json.RawMessage) providers.BoundProvider {
	b := &bound{p: p, parent: parent, pods: map[string]*corev1.Pod{}, keep: map[string]json.RawMessage{}}
	for _, raw := range observed[PodTypeKey] {
		var pod corev1.Pod
		if err := json.Unmarshal(raw, &pod); err != nil || pod.Name == "" {
			// Metacontroller sends what the API server stored; an undecodable Pod is left out
			// of what Get can find, and still kept by the pass-through in Children.
			continue
		}
		b.pods[pod.Name] = &pod
	}
	return b
}

// bound is one sync's view of the Proxy's Pods. It is used by one goroutine.
type bound struct {
	p      *Provider
	parent providers.Parent
	pods   map[string]*corev1.Pod
	// keep is the desired children so far; touched says the sync core made a call, so keep is
	// its whole intent (until then, what exists is left alone).
	keep    map[string]json.RawMessage
	touched bool
}

// Create records the desired Pod. Idempotent: the name is a function of the request.
func (b *bound) Create(_ context.Context, req providers.CreateRequest) (string, error) {
	b.touched = true
	pod := b.p.pod(req, b.parent)
	raw, err := marshalChild(pod)
	if err != nil {
		return "", providers.Wrap(providers.ErrPermanent, "kubernetes create", err)
	}
	b.keep[pod.Name] = raw
	return pod.Name, nil
}

// Get reads the observed Pod named id; a Pod not in the request is ErrNotFound.
func (b *bound) Get(_ context.Context, id string) (*providers.Instance, error) {
	b.touched = true
	pod, ok := b.pods[id]
	if !ok {
		return nil, providers.Wrap(providers.ErrNotFound, "kubernetes get", fmt.Errorf("pod %s/%s", b.parent.Namespace, id))
	}
	inst := instance(pod)
	if inst.State != providers.StateTerminated {
		raw, err := marshalChild(observedChild(pod))
		if err != nil {
			return nil, providers.Wrap(providers.ErrPermanent, "kubernetes get", err)
		}
		b.keep[id] = raw
	}
	return &inst, nil
}

// Delete drops the Pod from the desired children; Metacontroller deletes it. Idempotent.
func (b *bound) Delete(_ context.Context, id string) error {
	b.touched = true
	delete(b.keep, id)
	return nil
}

// ListByTag returns the observed Pods carrying the managed tag.
func (b *bound) ListByTag(context.Context) ([]providers.Instance, error) {
	out := []providers.Instance{}
	for _, name := range slices.Sorted(maps.Keys(b.pods)) {
		pod := b.pods[name]
		if pod.Labels[providers.TagManaged] == "true" {
			out = append(out, instance(pod))
		}
	}
	return out, nil
}

// Children returns the desired children, sorted by name.
func (b *bound) Children(finalizing bool) []json.RawMessage {
	out := []json.RawMessage{}
	if finalizing {
		return out
	}
	keep := b.keep
	if !b.touched {
		keep = map[string]json.RawMessage{}
		for name, pod := range b.pods {
			if pod.DeletionTimestamp != nil {
				continue
			}
			if raw, err := marshalChild(observedChild(pod)); err == nil {
				keep[name] = raw
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(keep)) {
		out = append(out, keep[name])
	}
	return out
}

// instance maps an observed Pod onto the provider contract.
func instance(pod *corev1.Pod) providers.Instance {
	inst := providers.Instance{
		ID:        pod.Name,
		Name:      pod.Name,
		IP:        pod.Status.PodIP,
		State:     providers.StateProvisioning,
		OwnerUID:  pod.Labels[providers.TagOwnerUID],
		SpecHash:  pod.Labels[providers.TagSpecHash],
		CreatedAt: pod.CreationTimestamp.UTC(),
	}
	switch {
	case pod.DeletionTimestamp != nil, pod.Status.Phase == corev1.PodFailed, pod.Status.Phase == corev1.PodSucceeded:
		// A Pod that ended or is going away is replaced, never waited for.
		inst.State = providers.StateTerminated
	case pod.Status.Phase == corev1.PodRunning && ready(pod) && pod.Status.PodIP != "":
		inst.State = providers.StateRunning
	default:
		// Pending, Unknown (node unreachable) and Running-but-not-ready all wait.
		inst.IP = ""
	}
	return inst
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod builds the desired Pod of a create request. It is a pure function of its inputs.
func (p *Provider) pod(req providers.CreateRequest, parent providers.Parent) *corev1.Pod {
	image := p.image
	if req.Image != "" {
		image = req.Image
	}
	port := req.Port
	labels := req.Tags()
	labels[LabelName] = "squid"
	labels[LabelManagedBy] = "proxy-operator"
	ns := req.Namespace
	if ns == "" {
		ns = parent.Namespace
	}
	c := corev1.Container{
		Name:      containerName,
		Image:     image,
		Ports:     []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		Resources: *p.resources.DeepCopy(),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: 3,
			SuccessThreshold: 1,
		},
	}
	if len(c.Resources.Limits) == 0 {
		c.Resources.Limits = nil
	}
	// The image's own squid.conf is replaced by one that listens where spec.port (and the
	// readiness probe) say and demands the credential from the mounted Secret.
	c.Command = []string{"/bin/sh", "-c", `printf '%s\n' "$SQUID_CONF" > ` + RunDir + `/squid.conf && exec squid -N -f ` + RunDir + `/squid.conf`}
	c.Env = []corev1.EnvVar{{Name: "SQUID_CONF", Value: SquidConfig(port, CredentialsDir, RunDir, p.denied...)}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: credentialsVolume, MountPath: CredentialsDir, ReadOnly: true}}
	owner := req.OwnerUID
	if owner == "" {
		owner = parent.UID
	}
	no := false
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			// The instance name carries the spec hash (providers.InstanceName): a spec change
			// is a new child, and Metacontroller deletes the old one once it is not returned.
			Name:        req.Name,
			Namespace:   ns,
			Labels:      labels,
			Annotations: map[string]string{AnnotationProxy: req.ProxyName},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: credentialsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: credentials.SecretName(owner),
				Items:      []corev1.KeyToPath{{Key: credentials.KeyHtpasswd, Path: credentials.KeyHtpasswd}},
			}}}},
			// The proxy needs no API credentials; a crawler reaching it must not find any.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
		},
	}
	if req.Zone != "" {
		pod.Spec.NodeSelector = map[string]string{zoneNodeLabel: req.Zone}
	}
	return pod
}

// observedChild is the Pod to return for one that exists: its identity, labels and spec,
// without status or server-set metadata. The CompositeController's OnDelete strategy never
// updates an existing child, so this only has to keep it.
func observedChild(pod *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        pod.Name,
			Namespace:   pod.Namespace,
			Labels:      pod.Labels,
			Annotations: pod.Annotations,
		},
		Spec: pod.Spec,
	}
}

// marshalChild encodes a Pod for the sync response with no nulls and no status: a null or an
// empty status would look like a difference to Metacontroller on every sync.
func marshalChild(pod *corev1.Pod) (json.RawMessage, error) {
	b, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	return json.Marshal(prune(m))
}

// prune drops null values and empty objects, recursively.
func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			e = prune(e)
			if e == nil {
				delete(t, k)
				continue
			}
			if m, ok := e.(map[string]any); ok && len(m) == 0 {
				delete(t, k)
				continue
			}
			t[k] = e
		}
		return t
	case []any:
		for i := range t {
			t[i] = prune(t[i])
		}
		return t
	}
	return v
}
