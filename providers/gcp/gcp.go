//go:build !omit_gcp

// Package gcp owns the Compute Engine provider: a Managed proxy is one VM with an ephemeral
// external IP, created, read, deleted and listed through the Compute REST API with the Cloud
// Client Library and Application Default Credentials. It maps the API's answers onto the
// providers contract and its error taxonomy; it knows nothing of Proxies, Metacontroller or
// when to retry.
package gcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	httptransport "google.golang.org/api/transport/http"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Defaults for Config fields left empty.
const (
	DefaultNetwork        = "global/networks/default"
	DefaultNetworkTag     = "proxy-operator"
	DefaultRequestTimeout = 30 * time.Second
	// accessConfigName is the name the console and gcloud give the ephemeral external IP.
	accessConfigName = "External NAT"
	// userDataKey is the metadata key cloud-init reads on Compute Engine images.
	userDataKey = "user-data"
	// idScheme prefixes every provider ID, so an ID from another provider fails to parse.
	idScheme = "gcp://"
	// cloudPlatformScope is the only scope an attached service account gets; its IAM roles
	// decide what the VM may do.
	cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"
)

// Provider creates proxies as Compute Engine VMs.
type Provider struct {
	cfg     Config
	timeout time.Duration
	client  *compute.InstancesClient
	// noRetry turns off the client library's own retries: the sync core owns retrying (with
	// backoff across syncs), and a retry loop inside one call would spend the hook's deadline.
	noRetry gax.CallOption
	// lists counts ListByTag readers still running after their caller gave up, so Close can
	// wait for them (at most the request timeout) instead of closing the client under them.
	lists sync.WaitGroup

	// inserts are the insert operations still running, by provider ID: a VM that fails after
	// the insert was accepted (a zone out of machines, most often) simply never appears, and
	// Get reports the operation's error instead of a bare NotFound that would only make the
	// sync core insert again, forever and silently. In memory only: after a restart the next
	// insert is recorded again.
	mu      sync.Mutex
	inserts map[string]*compute.Operation
}

// maxPendingInserts bounds the inserts map; past it an insert is simply not followed.
const maxPendingInserts = 10000

var _ providers.Provider = (*Provider)(nil)

// New validates cfg and builds the REST client. Credentials are Application Default
// Credentials unless opts say otherwise (tests point the client at a local stand-in with
// option.WithEndpoint and option.WithoutAuthentication). ctx must outlive the provider: the
// auth library may keep it for token refreshes.
func New(ctx context.Context, cfg Config, opts ...option.ClientOption) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Network == "" {
		cfg.Network = DefaultNetwork
	}
	if cfg.NetworkTag == "" {
		cfg.NetworkTag = DefaultNetworkTag
	}
	timeout := time.Duration(cfg.RequestTimeout)
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	// The HTTP client is built here, with the same defaults the generated client would use, so
	// that every request has a hard timeout: AggregatedList in this library version sends its
	// requests without the caller's context, so nothing else would bound a page that hangs.
	hc, _, err := httptransport.NewClient(ctx, append(clientDefaults(), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("gcp: credentials (Application Default Credentials: workload identity in a cluster, `gcloud auth application-default login` on a workstation): %w", err)
	}
	bounded := *hc
	bounded.Timeout = timeout
	client, err := compute.NewInstancesRESTClient(ctx, slices.Concat(opts, []option.ClientOption{option.WithHTTPClient(&bounded)})...)
	if err != nil {
		return nil, fmt.Errorf("gcp: instances client: %w", err)
	}
	return &Provider{
		cfg:     cfg,
		timeout: timeout,
		client:  client,
		noRetry: gax.WithRetry(func() gax.Retryer { return nil }),
		inserts: map[string]*compute.Operation{},
	}, nil
}

// clientDefaults are the generated REST client's own defaults (endpoint, universe, audience,
// scopes), for the HTTP client New builds in its place.
func clientDefaults() []option.ClientOption {
	return []option.ClientOption{
		internaloption.WithDefaultEndpoint("https://compute.googleapis.com"),
		internaloption.WithDefaultEndpointTemplate("https://compute.UNIVERSE_DOMAIN"),
		internaloption.WithDefaultMTLSEndpoint("https://compute.mtls.googleapis.com"),
		internaloption.WithDefaultUniverseDomain("googleapis.com"),
		internaloption.WithDefaultAudience("https://compute.googleapis.com/"),
		internaloption.WithDefaultScopes(compute.DefaultAuthScopes()...),
		internaloption.EnableNewAuthLibrary(),
	}
}

// Close waits for list readers still running (each ends within the request timeout), then
// releases the client's connections. No call may start after Close.
func (p *Provider) Close() error {
	p.lists.Wait()
	return p.client.Close()
}

// Create submits an instances.insert and returns without waiting for the operation. A name
// that already exists (409) is the instance an earlier Create made, and its ID is returned.
var _ providers.CreateChecker = (*Provider)(nil)

// CheckCreate returns the error Create gives, without a call, for a request no VM can be made
// from (a missing zone, machine type or image, a value that is not a label).
func (p *Provider) CheckCreate(req providers.CreateRequest) error {
	if _, err := p.instance(req); err != nil {
		return providers.Wrap(providers.ErrPermanent, "gcp insert", err)
	}
	return nil
}

func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (string, error) {
	const op = "gcp insert"
	inst, err := p.instance(req)
	if err != nil {
		return "", providers.Wrap(providers.ErrPermanent, op, err)
	}
	id := FormatID(p.cfg.Project, req.Zone, req.Name)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	o, err := p.client.Insert(ctx, &computepb.InsertInstanceRequest{
		Project:          p.cfg.Project,
		Zone:             req.Zone,
		InstanceResource: inst,
	}, p.noRetry)
	if err != nil {
		if httpCode(err) == 409 {
			return id, nil
		}
		// A 404 here is the zone, image, network or machine type, never the instance: the
		// spec names something that does not exist.
		return "", providers.Wrap(notFoundAs(classify(err), providers.ErrPermanent), op, err)
	}
	if err := operationError(o.Proto()); err != nil {
		if errors.Is(err, errAlreadyExists) {
			return id, nil
		}
		return "", providers.Wrap(operationClass(o.Proto()), op, err)
	}
	if !o.Done() {
		p.mu.Lock()
		if len(p.inserts) < maxPendingInserts {
			p.inserts[id] = o
		}
		p.mu.Unlock()
	}
	return id, nil
}

// takeInsert removes and returns the insert operation followed for id, if any; the caller
// owns it (Poll changes it) until it puts it back.
func (p *Provider) takeInsert(id string) *compute.Operation {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.inserts[id]
	delete(p.inserts, id)
	return o
}

func (p *Provider) putInsert(id string, o *compute.Operation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, newer := p.inserts[id]; !newer && len(p.inserts) < maxPendingInserts {
		p.inserts[id] = o
	}
}

// failedInsert polls the insert operation of an instance Get did not find. It returns the
// operation's error when it failed, and nil when there is none to follow, it succeeded (the VM
// was made and has since gone), it still runs, or it cannot be read now.
func (p *Provider) failedInsert(ctx context.Context, id string) error {
	o := p.takeInsert(id)
	if o == nil {
		return nil
	}
	// Poll's own error repeats the operation's failure when there is one; the proto below is
	// what says whether the operation ended, so the error is not needed.
	_ = o.Poll(ctx, p.noRetry)
	if !o.Done() {
		p.putInsert(id, o)
		return nil
	}
	if err := operationError(o.Proto()); err != nil && !errors.Is(err, errAlreadyExists) {
		return providers.Wrap(operationClass(o.Proto()), "gcp insert", err)
	}
	return nil
}

// instance builds the insert body, or says which required field is missing or malformed.
func (p *Provider) instance(req providers.CreateRequest) (*computepb.Instance, error) {
	for _, f := range []struct{ name, value string }{
		{"placement.zone", req.Zone},
		{"placement.machineType", req.MachineType},
		{"placement.image", req.Image},
	} {
		if f.value == "" {
			return nil, fmt.Errorf("%s is required for a Managed gcp proxy", f.name)
		}
	}
	if !nameRE.MatchString(req.Zone) {
		return nil, fmt.Errorf("placement.zone %q is not a zone name (e.g. europe-west1-b)", req.Zone)
	}
	if !nameRE.MatchString(req.Name) {
		return nil, fmt.Errorf("instance name %q is not a Compute Engine name", req.Name)
	}
	labels := req.Tags()
	for k, v := range labels {
		if !labelValueRE.MatchString(v) {
			return nil, fmt.Errorf("label %s=%q is not a Compute Engine label value (lowercase letters, digits, '_' and '-', at most 63)", k, v)
		}
	}
	boot := &computepb.AttachedDisk{
		Boot:       new(true),
		AutoDelete: new(true),
		Type:       new(computepb.AttachedDisk_PERSISTENT.String()),
		InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: new(p.imageURL(req.Image)),
		},
	}
	if p.cfg.DiskSizeGb > 0 {
		boot.InitializeParams.DiskSizeGb = new(p.cfg.DiskSizeGb)
	}
	nic := &computepb.NetworkInterface{
		Network: new(p.cfg.Network),
		AccessConfigs: []*computepb.AccessConfig{{
			Name: new(accessConfigName),
			Type: new(computepb.AccessConfig_ONE_TO_ONE_NAT.String()),
		}},
	}
	if p.cfg.Subnetwork != "" {
		nic.Subnetwork = new(p.cfg.Subnetwork)
	}
	inst := &computepb.Instance{
		Name:              new(req.Name),
		Description:       new(fmt.Sprintf("proxy-operator: Proxy %s/%s", req.Namespace, req.ProxyName)),
		MachineType:       new(machineTypeURL(req.Zone, req.MachineType)),
		Labels:            labels,
		Tags:              &computepb.Tags{Items: []string{p.cfg.NetworkTag}},
		Disks:             []*computepb.AttachedDisk{boot},
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
	}
	var items []*computepb.Items
	if req.CloudInit != "" {
		items = append(items, &computepb.Items{Key: new(userDataKey), Value: new(req.CloudInit)})
	}
	if req.Credentials != nil {
		script, err := startupScript(*req.Credentials)
		if err != nil {
			return nil, err
		}
		items = append(items, &computepb.Items{Key: new(startupScriptKey), Value: new(script)})
	}
	if len(items) > 0 {
		inst.Metadata = &computepb.Metadata{Items: items}
	}
	if p.cfg.ServiceAccount != "" {
		inst.ServiceAccounts = []*computepb.ServiceAccount{{Email: new(p.cfg.ServiceAccount), Scopes: []string{cloudPlatformScope}}}
	}
	return inst, nil
}

// machineTypeURL turns "e2-small" into the zonal partial URL the API wants; anything with a
// slash is taken to be a URL already.
func machineTypeURL(zone, machineType string) string {
	if strings.Contains(machineType, "/") {
		return machineType
	}
	return "zones/" + zone + "/machineTypes/" + machineType
}

// imageURL accepts full URLs and "projects/..." partial URLs as they are; "global/images/x"
// and "family/x" and a bare name are images of the configured project.
func (p *Provider) imageURL(image string) string {
	switch {
	case strings.HasPrefix(image, "https://"), strings.HasPrefix(image, "projects/"):
		return image
	case strings.HasPrefix(image, "global/"):
		return "projects/" + p.cfg.Project + "/" + image
	default:
		return "projects/" + p.cfg.Project + "/global/images/" + image
	}
}

// Get reads one instance; a missing one is (nil, ErrNotFound).
func (p *Provider) Get(ctx context.Context, providerID string) (*providers.Instance, error) {
	const op = "gcp get"
	project, zone, name, err := ParseID(providerID)
	if err != nil {
		return nil, providers.Wrap(providers.ErrPermanent, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	inst, err := p.client.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name}, p.noRetry)
	if err != nil {
		kind := classify(err)
		if kind == providers.ErrNotFound {
			if failed := p.failedInsert(ctx, providerID); failed != nil {
				return nil, failed
			}
		}
		return nil, providers.Wrap(kind, op, err)
	}
	p.takeInsert(providerID)
	out := toInstance(project, zone, inst)
	return &out, nil
}

// Delete submits an instances.delete and returns without waiting; a missing instance is done.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	const op = "gcp delete"
	project, zone, name, err := ParseID(providerID)
	if err != nil {
		return providers.Wrap(providers.ErrPermanent, op, err)
	}
	p.takeInsert(providerID)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	o, err := p.client.Delete(ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: name}, p.noRetry)
	if err != nil {
		kind := classify(err)
		if kind == providers.ErrNotFound {
			return nil
		}
		return providers.Wrap(kind, op, err)
	}
	if err := operationError(o.Proto()); err != nil {
		return providers.Wrap(operationClass(o.Proto()), op, err)
	}
	return nil
}

// managedFilter is the server-side filter of ListByTag.
var managedFilter = "labels." + providers.TagManaged + "=true"

// ListByTag returns every managed instance in the project, across zones and pages. The pages
// are read on their own goroutine because the library does not pass ctx to these requests:
// the caller gets its answer at its deadline, and the reader stops at the request timeout.
func (p *Provider) ListByTag(ctx context.Context) ([]providers.Instance, error) {
	return p.listFiltered(ctx, managedFilter, "")
}

var _ providers.OwnerLister = (*Provider)(nil)

// ListByOwner returns one owner's managed instances. The owner label is filtered on the
// server, so the sync's lookup before a create reads one or two instances, not the project.
func (p *Provider) ListByOwner(ctx context.Context, ownerUID string) ([]providers.Instance, error) {
	if !labelValueRE.MatchString(ownerUID) || ownerUID == "" {
		// Never a label value, so never an owner of ours: nothing to list.
		return nil, nil
	}
	filter := fmt.Sprintf(`(labels.%s = "true") (labels.%s = "%s")`, providers.TagManaged, providers.TagOwnerUID, ownerUID)
	return p.listFiltered(ctx, filter, ownerUID)
}

// listFiltered runs one aggregatedList with the server-side filter; owner, when set, is
// checked again on each instance.
func (p *Provider) listFiltered(ctx context.Context, filter, owner string) ([]providers.Instance, error) {
	const op = "gcp aggregatedList"
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	type result struct {
		list []providers.Instance
		err  error
	}
	done := make(chan result, 1)
	p.lists.Go(func() {
		list, err := p.list(ctx, filter, owner)
		done <- result{list, err}
	})
	select {
	case r := <-done:
		if r.err != nil {
			// A 404 is the project, not an instance: listing cannot succeed as configured.
			return nil, providers.Wrap(notFoundAs(classify(r.err), providers.ErrPermanent), op, r.err)
		}
		return r.list, nil
	case <-ctx.Done():
		return nil, providers.Wrap(providers.ErrTransient, op, ctx.Err())
	}
}

func (p *Provider) list(ctx context.Context, filter, owner string) ([]providers.Instance, error) {
	it := p.client.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: p.cfg.Project,
		Filter:  &filter,
	}, p.noRetry)
	var out []providers.Instance
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, inst := range pair.Value.GetInstances() {
			// The filter is the server's; this check keeps GC from ever seeing an untagged VM.
			if inst.GetLabels()[providers.TagManaged] != "true" || (owner != "" && inst.GetLabels()[providers.TagOwnerUID] != owner) {
				continue
			}
			z := zone
			if u := inst.GetZone(); u != "" {
				z = lastSegment(u)
			}
			out = append(out, toInstance(p.cfg.Project, z, inst))
		}
	}
}

// toInstance maps a Compute Engine instance onto the providers view.
func toInstance(project, zone string, inst *computepb.Instance) providers.Instance {
	out := providers.Instance{
		ID:       FormatID(project, zone, inst.GetName()),
		Name:     inst.GetName(),
		State:    stateOf(inst.GetStatus()),
		OwnerUID: inst.GetLabels()[providers.TagOwnerUID],
		SpecHash: inst.GetLabels()[providers.TagSpecHash],
		// Which stored credential the startup script installed (rotation replaces the VM).
		CredentialsVersion: inst.GetLabels()[providers.TagCredentials],
	}
	for _, nic := range inst.GetNetworkInterfaces() {
		for _, ac := range nic.GetAccessConfigs() {
			if ip := ac.GetNatIP(); ip != "" && out.IP == "" {
				out.IP = ip
			}
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, inst.GetCreationTimestamp()); err == nil {
		out.CreatedAt = t.UTC()
	}
	return out
}

// stateOf maps a Compute Engine status onto the providers states. REPAIRING comes back by
// itself, so it waits like a VM that is starting rather than being replaced; an unknown
// status waits too, since every destructive reading must be certain.
func stateOf(status string) providers.State {
	switch status {
	case "RUNNING":
		return providers.StateRunning
	case "STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "PENDING_STOP":
		return providers.StateStopped
	case "TERMINATED":
		return providers.StateTerminated
	default: // PROVISIONING, STAGING, REPAIRING, anything new
		return providers.StateProvisioning
	}
}

// FormatID is the provider ID of an instance: gcp://<project>/<zone>/<name>.
func FormatID(project, zone, name string) string {
	return idScheme + project + "/" + zone + "/" + name
}

// ParseID splits a provider ID made by FormatID.
func ParseID(id string) (project, zone, name string, err error) {
	rest, ok := strings.CutPrefix(id, idScheme)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || !projectRE.MatchString(parts[0]) || !nameRE.MatchString(parts[1]) || !nameRE.MatchString(parts[2]) {
		return "", "", "", fmt.Errorf("malformed provider ID %q (want gcp://<project>/<zone>/<instance>)", id)
	}
	return parts[0], parts[1], parts[2], nil
}

func lastSegment(u string) string {
	return u[strings.LastIndex(u, "/")+1:]
}
