//go:build !omit_hetzner

// Package hetzner owns the Hetzner Cloud provider: a Managed proxy is one server with a
// public IPv4 address, booted from user-data that carries the Proxy's cloud-init and
// credential, created, read, deleted and listed by label selector through the Hetzner Cloud
// API with its official Go client and a token read from a file (a mounted Secret). It maps the
// API's answers onto the providers contract and its error taxonomy; it knows nothing of
// Proxies, Metacontroller or when to retry.
package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/userdata"
)

// Defaults and limits.
const (
	DefaultRequestTimeout = 30 * time.Second
	// maxUserData is the API's limit on user-data.
	maxUserData = 32 << 10
	// maxTokenFile bounds what is read of the token file.
	maxTokenFile = 4 << 10
	idScheme     = "hetzner://"
)

// ReadToken reads the API token from path: one line, no spaces.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hetzner: tokenFile: %w", err)
	}
	defer f.Close()
	b := make([]byte, maxTokenFile+1)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("hetzner: tokenFile %s: %w", path, err)
	}
	if n > maxTokenFile {
		return "", fmt.Errorf("hetzner: tokenFile %s is larger than %d bytes; want one API token", path, maxTokenFile)
	}
	token := strings.TrimSpace(string(b[:n]))
	switch {
	case token == "":
		return "", fmt.Errorf("hetzner: tokenFile %s is empty", path)
	case strings.ContainsAny(token, " \t\r\n"):
		return "", fmt.Errorf("hetzner: tokenFile %s holds more than one word; want one API token", path)
	}
	return token, nil
}

// Provider creates proxies as Hetzner Cloud servers in one project.
type Provider struct {
	cfg     Config
	timeout time.Duration
	client  *hcloud.Client
}

var (
	_ providers.Provider      = (*Provider)(nil)
	_ providers.OwnerLister   = (*Provider)(nil)
	_ providers.CreateChecker = (*Provider)(nil)
)

// New validates cfg, reads the token and builds the client. Tests point it at a local
// stand-in with hcloud.WithEndpoint in opts.
func New(cfg Config, opts ...hcloud.ClientOption) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	token, err := ReadToken(cfg.TokenFile)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(cfg.RequestTimeout)
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	base := []hcloud.ClientOption{
		hcloud.WithToken(token),
		hcloud.WithApplication("proxy-operator", ""),
		hcloud.WithHTTPClient(&http.Client{Timeout: timeout}),
		// The sync core owns retrying (with backoff across syncs); a retry loop inside one
		// call would spend the hook's deadline.
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}),
	}
	return &Provider{cfg: cfg, timeout: timeout, client: hcloud.NewClient(append(base, opts...)...)}, nil
}

// CheckCreate returns the error Create gives, without a call, for a request no server can be
// made from.
func (p *Provider) CheckCreate(req providers.CreateRequest) error {
	if _, err := p.createOpts(req); err != nil {
		return providers.Wrap(providers.ErrPermanent, "hetzner create", err)
	}
	return nil
}

// Create creates the server named req.Name. Server names are unique in a project, so a name
// that is taken is the server an earlier Create made (its owner label is checked) and its ID
// is returned.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (string, error) {
	const op = "hetzner create"
	opts, err := p.createOpts(req)
	if err != nil {
		return "", providers.Wrap(providers.ErrPermanent, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, _, err := p.client.Server.Create(ctx, opts)
	if err == nil {
		if res.Server == nil {
			return "", providers.Wrap(providers.ErrTransient, op, errors.New("answer names no server"))
		}
		return FormatID(res.Server.ID), nil
	}
	if !hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		return "", providers.Wrap(notFoundAs(classify(err), providers.ErrPermanent), op, err)
	}
	srv, _, gerr := p.client.Server.GetByName(ctx, req.Name)
	switch {
	case gerr != nil:
		return "", providers.Wrap(classify(gerr), "hetzner get by name", gerr)
	case srv == nil:
		// Taken a moment ago, gone now (being deleted): try again later.
		return "", providers.Wrap(providers.ErrTransient, op, err)
	case srv.Labels[providers.TagOwnerUID] != req.OwnerUID:
		return "", providers.Wrap(providers.ErrPermanent, op, fmt.Errorf("server name %s is taken by a server this Proxy does not own (labels %v)", req.Name, srv.Labels))
	}
	return FormatID(srv.ID), nil
}

// createOpts builds the create request, or says which field is missing or malformed.
func (p *Provider) createOpts(req providers.CreateRequest) (hcloud.ServerCreateOpts, error) {
	location := req.Zone
	if location == "" {
		location = p.cfg.Location
	}
	switch {
	case req.MachineType == "":
		return hcloud.ServerCreateOpts{}, errors.New("placement.machineType is required for a Managed hetzner proxy (a server type, e.g. cx22)")
	case !typeRE.MatchString(req.MachineType):
		return hcloud.ServerCreateOpts{}, fmt.Errorf("placement.machineType %q is not a server type (e.g. cx22)", req.MachineType)
	case req.Image == "":
		return hcloud.ServerCreateOpts{}, errors.New("placement.image is required for a Managed hetzner proxy (an image name, e.g. ubuntu-24.04)")
	case !imageRE.MatchString(req.Image):
		return hcloud.ServerCreateOpts{}, fmt.Errorf("placement.image %q is not an image name (e.g. ubuntu-24.04)", req.Image)
	case location == "":
		return hcloud.ServerCreateOpts{}, errors.New("placement.zone is required for a Managed hetzner proxy when the provider has no location (e.g. fsn1)")
	case !locationRE.MatchString(location):
		return hcloud.ServerCreateOpts{}, fmt.Errorf("placement.zone %q is not a Hetzner location (e.g. fsn1)", location)
	case !nameRE.MatchString(req.Name):
		return hcloud.ServerCreateOpts{}, fmt.Errorf("instance name %q is not a server name", req.Name)
	}
	labels := req.Tags()
	for k, v := range labels {
		if !labelValueRE.MatchString(v) {
			return hcloud.ServerCreateOpts{}, fmt.Errorf("label %s=%q is not a Hetzner label value (letters, digits, '-', '_', '.', at most 63)", k, v)
		}
	}
	ud, err := userdata.Compose(req.CloudInit, req.Credentials)
	if err != nil {
		return hcloud.ServerCreateOpts{}, err
	}
	if len(ud) > maxUserData {
		return hcloud.ServerCreateOpts{}, fmt.Errorf("user-data is %d bytes (cloud-init and credential script), Hetzner takes at most %d", len(ud), maxUserData)
	}
	opts := hcloud.ServerCreateOpts{
		Name:             req.Name,
		ServerType:       &hcloud.ServerType{Name: req.MachineType},
		Image:            &hcloud.Image{Name: req.Image},
		Location:         &hcloud.Location{Name: location},
		UserData:         ud,
		Labels:           labels,
		StartAfterCreate: hcloud.Ptr(true),
		PublicNet:        &hcloud.ServerCreatePublicNet{EnableIPv4: true, EnableIPv6: p.cfg.EnableIPv6},
	}
	for _, id := range p.cfg.FirewallIDs {
		opts.Firewalls = append(opts.Firewalls, &hcloud.ServerCreateFirewall{Firewall: hcloud.Firewall{ID: id}})
	}
	return opts, nil
}

// Get reads one server; a missing one is (nil, ErrNotFound).
func (p *Provider) Get(ctx context.Context, providerID string) (*providers.Instance, error) {
	const op = "hetzner get"
	id, err := ParseID(providerID)
	if err != nil {
		return nil, providers.Wrap(providers.ErrPermanent, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	srv, _, err := p.client.Server.GetByID(ctx, id)
	if err != nil {
		return nil, providers.Wrap(classify(err), op, err)
	}
	if srv == nil {
		return nil, providers.Wrap(providers.ErrNotFound, op, fmt.Errorf("server %d", id))
	}
	out := toInstance(srv)
	return &out, nil
}

// Delete deletes the server; a missing one is done.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	const op = "hetzner delete"
	id, err := ParseID(providerID)
	if err != nil {
		return providers.Wrap(providers.ErrPermanent, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if _, _, err := p.client.Server.DeleteWithResult(ctx, &hcloud.Server{ID: id}); err != nil {
		kind := classify(err)
		if kind == providers.ErrNotFound {
			return nil
		}
		return providers.Wrap(kind, op, err)
	}
	return nil
}

// ListByTag returns every server of the project carrying the managed label, across pages.
func (p *Provider) ListByTag(ctx context.Context) ([]providers.Instance, error) {
	return p.list(ctx, providers.TagManaged+"=true", "")
}

// ListByOwner returns one owner's managed servers, selected by the API.
func (p *Provider) ListByOwner(ctx context.Context, ownerUID string) ([]providers.Instance, error) {
	if ownerUID == "" || !labelValueRE.MatchString(ownerUID) {
		// Never a label value, so never an owner of ours.
		return nil, nil
	}
	return p.list(ctx, providers.TagManaged+"=true,"+providers.TagOwnerUID+"="+ownerUID, ownerUID)
}

func (p *Provider) list(ctx context.Context, selector, owner string) ([]providers.Instance, error) {
	const op = "hetzner list"
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	servers, err := p.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: selector, PerPage: 50}})
	if err != nil {
		return nil, providers.Wrap(classify(err), op, err)
	}
	out := make([]providers.Instance, 0, len(servers))
	for _, s := range servers {
		// The selector is the API's; this check keeps GC from ever seeing an unlabelled server.
		if s.Labels[providers.TagManaged] != "true" || (owner != "" && s.Labels[providers.TagOwnerUID] != owner) {
			continue
		}
		out = append(out, toInstance(s))
	}
	return out, nil
}

// toInstance maps a server onto the providers view.
func toInstance(s *hcloud.Server) providers.Instance {
	out := providers.Instance{
		ID:                 FormatID(s.ID),
		Name:               s.Name,
		State:              stateOf(s.Status),
		OwnerUID:           s.Labels[providers.TagOwnerUID],
		SpecHash:           s.Labels[providers.TagSpecHash],
		CredentialsVersion: s.Labels[providers.TagCredentials],
		CreatedAt:          s.Created.UTC(),
	}
	if out.State == providers.StateRunning && s.PublicNet.IPv4.IP != nil {
		out.IP = s.PublicNet.IPv4.IP.String()
	}
	return out
}

// stateOf maps a server status onto the providers states; an unknown status waits.
func stateOf(s hcloud.ServerStatus) providers.State {
	switch s {
	case hcloud.ServerStatusRunning:
		return providers.StateRunning
	case hcloud.ServerStatusOff, hcloud.ServerStatusStopping:
		return providers.StateStopped
	case hcloud.ServerStatusDeleting:
		return providers.StateTerminated
	default: // initializing, starting, migrating, rebuilding, unknown
		return providers.StateProvisioning
	}
}

// FormatID is the provider ID of a server: hetzner://<server id>.
func FormatID(id int64) string { return idScheme + strconv.FormatInt(id, 10) }

// ParseID reads a provider ID made by FormatID.
func ParseID(providerID string) (int64, error) {
	rest, ok := strings.CutPrefix(providerID, idScheme)
	id, err := strconv.ParseInt(rest, 10, 64)
	if !ok || err != nil || id <= 0 {
		return 0, fmt.Errorf("malformed provider ID %q (want hetzner://<server id>)", providerID)
	}
	return id, nil
}
