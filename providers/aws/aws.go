//go:build !omit_aws

// Package aws owns the EC2 provider: a Managed proxy is one instance (on demand or spot) with
// a public IP, booted from user-data that carries the Proxy's cloud-init and credential,
// created, read, terminated and listed through the EC2 API with the AWS SDK for Go v2 and the
// SDK's standard credential chain. It maps EC2's answers onto the providers contract and its
// error taxonomy; it knows nothing of Proxies, Metacontroller or when to retry.
package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/userdata"
)

// Defaults and limits.
const (
	DefaultRequestTimeout = 30 * time.Second
	// maxUserData is EC2's limit on user-data before base64.
	maxUserData = 16 << 10
	// maxListPages bounds one ListByTag (1000 instances a page).
	maxListPages = 100
	// maxTokenChain bounds how many terminated instances Create steps past (see Create).
	maxTokenChain = 8
	// idScheme prefixes every provider ID, so an ID from another provider fails to parse.
	idScheme = "aws://"
	// tagName is the tag the console shows as the instance's name; Create looks it up.
	tagName = "Name"
)

// Provider creates proxies as EC2 instances in one region of one account.
type Provider struct {
	cfg     Config
	timeout time.Duration
	client  *ec2.Client
}

var (
	_ providers.Provider      = (*Provider)(nil)
	_ providers.OwnerLister   = (*Provider)(nil)
	_ providers.CreateChecker = (*Provider)(nil)
)

// New validates cfg and builds the EC2 client from the SDK's standard config chain. Tests
// point it at a local stand-in with config.WithBaseEndpoint and static credentials in opts.
// Credentials are resolved at the first call, not here, so a missing one shows as that call's
// error (and in the provider's metrics), not as a process that will not start.
func New(ctx context.Context, cfg Config, opts ...func(*config.LoadOptions) error) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	timeout := time.Duration(cfg.RequestTimeout)
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	load := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		// The sync core owns retrying (with backoff across syncs); a retry loop inside one
		// call would spend the hook's deadline.
		config.WithRetryMaxAttempts(1),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(timeout)),
	}
	if cfg.Profile != "" {
		load = append(load, config.WithSharedConfigProfile(cfg.Profile))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, slices.Concat(load, opts)...)
	if err != nil {
		return nil, fmt.Errorf("aws: config (the standard chain: AWS_* environment, web identity for IRSA, shared config profile %q): %w", cfg.Profile, err)
	}
	return &Provider{cfg: cfg, timeout: timeout, client: ec2.NewFromConfig(awsCfg)}, nil
}

// CheckCreate returns the error Create gives, without a call, for a request no instance can
// be made from.
func (p *Provider) CheckCreate(req providers.CreateRequest) error {
	if _, err := p.runInput(req); err != nil {
		return providers.Wrap(providers.ErrPermanent, "aws run", err)
	}
	return nil
}

// Create starts the instance named req.Name, or returns the one that already carries the name.
//
// Two things make it idempotent. First it looks the name up among live instances (a create
// whose answer was lost, or one an older operator made). Then RunInstances carries a client
// token, so a retry EC2 has seen (its describe is only eventually consistent, and may not show
// an instance made a second ago) returns the same instance instead of a second one. A token
// stays bound to its instance after that instance is terminated, so when the token answers
// with a dead instance (the cloud took it, the sync core deleted it to replace it) Create moves
// on to a token derived from that instance's ID: deterministic, so a retry walks the same chain.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (string, error) {
	const op = "aws run"
	in, err := p.runInput(req)
	if err != nil {
		return "", providers.Wrap(providers.ErrPermanent, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	existing, err := p.describe(ctx, []types.Filter{
		filter("tag:"+tagName, req.Name),
		filter("tag:"+providers.TagManaged, "true"),
		filter("tag:"+providers.TagOwnerUID, req.OwnerUID),
		filter("instance-state-name", liveStates...),
	}, nil)
	if err != nil {
		return "", providers.Wrap(classify(err), "aws describe", err)
	}
	if len(existing) > 0 {
		return p.id(*existing[0].InstanceId), nil
	}
	token := req.Name
	for range maxTokenChain {
		in.ClientToken = awssdk.String(token)
		inst, err := p.run(ctx, in)
		if err != nil {
			return "", err
		}
		if inst == nil || inst.InstanceId == nil {
			return "", providers.Wrap(providers.ErrTransient, op, errors.New("answer names no instance"))
		}
		if live(inst) {
			return p.id(*inst.InstanceId), nil
		}
		token = req.Name + "-" + shortHash(*inst.InstanceId)
	}
	return "", providers.Wrap(providers.ErrTransient, op, fmt.Errorf("client tokens of %s named %d terminated instances", req.Name, maxTokenChain))
}

// run sends one RunInstances. A token EC2 has seen with other parameters (the credential
// script's bcrypt salt differs on every call) answers IdempotentParameterMismatch: the
// instance that token made is then read by its token.
func (p *Provider) run(ctx context.Context, in *ec2.RunInstancesInput) (*types.Instance, error) {
	const op = "aws run"
	out, err := p.client.RunInstances(ctx, in)
	if err == nil {
		if len(out.Instances) == 0 {
			return nil, nil
		}
		return &out.Instances[0], nil
	}
	if errorCode(err) != "IdempotentParameterMismatch" {
		return nil, providers.Wrap(notFoundAs(classify(err), providers.ErrPermanent), op, err)
	}
	insts, derr := p.describe(ctx, []types.Filter{filter("client-token", *in.ClientToken)}, nil)
	if derr != nil {
		return nil, providers.Wrap(classify(derr), "aws describe", derr)
	}
	if len(insts) == 0 {
		// EC2 knows the token but its describe does not show the instance yet.
		return nil, providers.Wrap(providers.ErrTransient, op, err)
	}
	return &insts[0], nil
}

// liveStates are the instance states of a machine that exists or is coming.
var liveStates = []string{"pending", "running", "stopping", "stopped"}

func live(inst *types.Instance) bool {
	return inst.State != nil && slices.Contains(liveStates, string(inst.State.Name))
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// runInput builds the RunInstances request, or says which field is missing or malformed.
func (p *Provider) runInput(req providers.CreateRequest) (*ec2.RunInstancesInput, error) {
	switch {
	case req.MachineType == "":
		return nil, errors.New("placement.machineType is required for a Managed aws proxy (an instance type, e.g. t4g.nano)")
	case !typeRE.MatchString(req.MachineType):
		return nil, fmt.Errorf("placement.machineType %q is not an EC2 instance type (e.g. t4g.nano)", req.MachineType)
	case req.Image == "":
		return nil, errors.New("placement.image is required for a Managed aws proxy (an AMI ID of the region, ami-0123abcd...)")
	case !amiRE.MatchString(req.Image):
		return nil, fmt.Errorf("placement.image %q is not an AMI ID (ami-0123abcd...)", req.Image)
	case req.Region != "" && req.Region != p.cfg.Region:
		return nil, fmt.Errorf("placement.region %q differs from the provider's region %q", req.Region, p.cfg.Region)
	case req.Zone != "" && !strings.HasPrefix(req.Zone, p.cfg.Region):
		return nil, fmt.Errorf("placement.zone %q is not a zone of region %q", req.Zone, p.cfg.Region)
	case !nameRE.MatchString(req.Name):
		return nil, fmt.Errorf("instance name %q is not a client token", req.Name)
	case req.OwnerUID == "":
		return nil, errors.New("owner UID is required")
	}
	ud, err := userdata.Compose(req.CloudInit, req.Credentials)
	if err != nil {
		return nil, err
	}
	if len(ud) > maxUserData {
		return nil, fmt.Errorf("user-data is %d bytes (cloud-init and credential script), EC2 takes at most %d", len(ud), maxUserData)
	}
	tags := []types.Tag{{Key: awssdk.String(tagName), Value: awssdk.String(req.Name)}}
	want := req.Tags()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(want[k])})
	}
	nic := types.InstanceNetworkInterfaceSpecification{
		DeviceIndex:              awssdk.Int32(0),
		AssociatePublicIpAddress: awssdk.Bool(true),
		DeleteOnTermination:      awssdk.Bool(true),
		Groups:                   p.cfg.SecurityGroupIDs,
	}
	if p.cfg.SubnetID != "" {
		nic.SubnetId = awssdk.String(p.cfg.SubnetID)
	}
	in := &ec2.RunInstancesInput{
		ImageId:           awssdk.String(req.Image),
		InstanceType:      types.InstanceType(req.MachineType),
		MinCount:          awssdk.Int32(1),
		MaxCount:          awssdk.Int32(1),
		NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{nic},
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeVolume, Tags: tags},
		},
		// A shutdown from inside the machine ends it, as an interruption does: the sync core
		// replaces it either way.
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		MetadataOptions: &types.InstanceMetadataOptionsRequest{
			// IMDSv2 only: the user-data holds the htpasswd line.
			HttpTokens: types.HttpTokensStateRequired,
		},
	}
	if ud != "" {
		in.UserData = awssdk.String(base64.StdEncoding.EncodeToString([]byte(ud)))
	}
	if req.Zone != "" {
		in.Placement = &types.Placement{AvailabilityZone: awssdk.String(req.Zone)}
	}
	if p.cfg.Spot {
		spot := &types.SpotMarketOptions{
			SpotInstanceType:             types.SpotInstanceTypeOneTime,
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if p.cfg.SpotMaxPrice != "" {
			spot.MaxPrice = awssdk.String(p.cfg.SpotMaxPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: spot}
	}
	return in, nil
}

// Get reads one instance. A missing or terminated one is (nil, ErrNotFound): EC2 shows a
// terminated instance for about an hour, but nothing of it is left.
func (p *Provider) Get(ctx context.Context, providerID string) (*providers.Instance, error) {
	const op = "aws describe"
	region, id, err := ParseID(providerID)
	if err != nil || region != p.cfg.Region {
		return nil, providers.Wrap(providers.ErrPermanent, op, p.foreign(providerID, err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	insts, err := p.describe(ctx, nil, []string{id})
	if err != nil {
		return nil, providers.Wrap(classify(err), op, err)
	}
	for _, inst := range insts {
		if awssdk.ToString(inst.InstanceId) == id && inst.State != nil && inst.State.Name != types.InstanceStateNameTerminated {
			out := p.toInstance(inst)
			return &out, nil
		}
	}
	return nil, providers.Wrap(providers.ErrNotFound, op, fmt.Errorf("instance %s", id))
}

// foreign is the error for an ID this provider cannot act on.
func (p *Provider) foreign(id string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("provider ID %q is not of region %s", id, p.cfg.Region)
}

// Delete terminates the instance; a missing one is done.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	const op = "aws terminate"
	region, id, err := ParseID(providerID)
	if err != nil || region != p.cfg.Region {
		return providers.Wrap(providers.ErrPermanent, op, p.foreign(providerID, err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if _, err := p.client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		kind := classify(err)
		if kind == providers.ErrNotFound {
			return nil
		}
		return providers.Wrap(kind, op, err)
	}
	return nil
}

// ListByTag returns every instance of the region carrying the managed tag that exists and is
// not going away (shutting-down and terminated ones are left out: nothing is left to collect),
// across pages.
func (p *Provider) ListByTag(ctx context.Context) ([]providers.Instance, error) {
	return p.list(ctx, filter("tag:"+providers.TagManaged, "true"))
}

// ListByOwner returns one owner's managed instances, filtered by EC2.
func (p *Provider) ListByOwner(ctx context.Context, ownerUID string) ([]providers.Instance, error) {
	if ownerUID == "" {
		return nil, nil
	}
	return p.list(ctx, filter("tag:"+providers.TagManaged, "true"), filter("tag:"+providers.TagOwnerUID, ownerUID))
}

func (p *Provider) list(ctx context.Context, filters ...types.Filter) ([]providers.Instance, error) {
	const op = "aws describe"
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	filters = append(filters, filter("instance-state-name", liveStates...))
	insts, err := p.describe(ctx, filters, nil)
	if err != nil {
		return nil, providers.Wrap(classify(err), op, err)
	}
	out := make([]providers.Instance, 0, len(insts))
	for _, inst := range insts {
		// The filter is EC2's; this check keeps GC from ever seeing an untagged instance.
		if tagValue(inst.Tags, providers.TagManaged) != "true" {
			continue
		}
		out = append(out, p.toInstance(inst))
	}
	return out, nil
}

// describe reads every page of one DescribeInstances, up to maxListPages.
func (p *Provider) describe(ctx context.Context, filters []types.Filter, ids []string) ([]types.Instance, error) {
	in := &ec2.DescribeInstancesInput{Filters: filters, InstanceIds: ids}
	if len(ids) == 0 {
		in.MaxResults = awssdk.Int32(1000)
	}
	pages := ec2.NewDescribeInstancesPaginator(p.client, in)
	var out []types.Instance
	for n := 0; pages.HasMorePages(); n++ {
		if n == maxListPages {
			return nil, fmt.Errorf("more than %d pages of instances", maxListPages)
		}
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: awssdk.String(name), Values: values}
}

func tagValue(tags []types.Tag, key string) string {
	for _, t := range tags {
		if awssdk.ToString(t.Key) == key {
			return awssdk.ToString(t.Value)
		}
	}
	return ""
}

// toInstance maps an EC2 instance onto the providers view.
func (p *Provider) toInstance(inst types.Instance) providers.Instance {
	out := providers.Instance{
		ID:                 p.id(awssdk.ToString(inst.InstanceId)),
		Name:               tagValue(inst.Tags, tagName),
		State:              stateOf(inst.State),
		OwnerUID:           tagValue(inst.Tags, providers.TagOwnerUID),
		SpecHash:           tagValue(inst.Tags, providers.TagSpecHash),
		CredentialsVersion: tagValue(inst.Tags, providers.TagCredentials),
	}
	if out.State == providers.StateRunning {
		out.IP = awssdk.ToString(inst.PublicIpAddress)
	}
	if inst.LaunchTime != nil {
		out.CreatedAt = inst.LaunchTime.UTC()
	}
	return out
}

// stateOf maps an EC2 state onto the providers states. shutting-down is Terminated (a spot
// interruption starts there): the machine is going and is replaced, never waited for.
func stateOf(s *types.InstanceState) providers.State {
	if s == nil {
		return providers.StateProvisioning
	}
	switch s.Name {
	case types.InstanceStateNameRunning:
		return providers.StateRunning
	case types.InstanceStateNameStopping, types.InstanceStateNameStopped:
		return providers.StateStopped
	case types.InstanceStateNameShuttingDown, types.InstanceStateNameTerminated:
		return providers.StateTerminated
	default: // pending, anything new
		return providers.StateProvisioning
	}
}

func (p *Provider) id(instanceID string) string { return FormatID(p.cfg.Region, instanceID) }

// FormatID is the provider ID of an instance: aws://<region>/<instance-id>.
func FormatID(region, instanceID string) string { return idScheme + region + "/" + instanceID }

// ParseID splits a provider ID made by FormatID.
func ParseID(id string) (region, instanceID string, err error) {
	rest, ok := strings.CutPrefix(id, idScheme)
	region, instanceID, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !regionRE.MatchString(region) || !instanceIDRE.MatchString(instanceID) {
		return "", "", fmt.Errorf("malformed provider ID %q (want aws://<region>/<instance-id>)", id)
	}
	return region, instanceID, nil
}
