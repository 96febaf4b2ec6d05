package replay

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/proxy-operator/proxy-operator/credentials"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// capturedDelay is the provisioning delay written into captured fixtures: long enough that
// a seeded Provisioning instance still shows Provisioning when the fixture is replayed,
// whatever the capturing provider's own delay was.
const capturedDelay = mock.Duration(24 * 365 * 60 * 60 * 1e9)

// Recorder writes every hook call the server handles as a fixture folder under
// Dir/<hook>/<time>-<seq>-<namespace>-<name>, so traffic from a real cluster can be replayed.
// It writes synchronously in the hook's path: it is a debugging aid, not for a busy fleet.
type Recorder struct {
	Dir string
	Log *slog.Logger

	mu  sync.Mutex
	seq int
}

var _ hooks.Recorder = (*Recorder)(nil)

// NewRecorder returns a Recorder writing under dir, which it creates.
func NewRecorder(dir string, log *slog.Logger) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{Dir: dir, Log: log}, nil
}

// Record implements hooks.Recorder. Failures are logged: capture never fails a hook call.
func (r *Recorder) Record(ex hooks.Exchange) {
	if len(ex.Request) == 0 {
		// Nothing to replay: the body was empty or was refused before it was read (413).
		r.Log.Debug("hook call not captured: no request body", "hook", ex.Hook, "code", ex.Code)
		return
	}
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	dir, err := r.write(ex, seq)
	if err != nil {
		r.Log.Error("capture failed", "hook", ex.Hook, "dir", dir, "err", err)
		return
	}
	r.Log.Debug("hook call captured", "hook", ex.Hook, "dir", dir)
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9.-]+`)

func (r *Recorder) write(ex hooks.Exchange, seq int) (string, error) {
	ns, name := parentName(ex.Request)
	leaf := fmt.Sprintf("%s-%06d", ex.Now.UTC().Format("20060102T150405Z"), seq)
	if name != "" {
		leaf += "-" + unsafeChars.ReplaceAllString(ns+"-"+name, "_")
	}
	dir := filepath.Join(r.Dir, ex.Hook, leaf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, err
	}
	// A capture never holds a credential: the Secrets in the request (observed children,
	// related Secrets) and in the response (the credentials Secret child) are redacted.
	if err := os.WriteFile(filepath.Join(dir, RequestFile), credentials.Redact(ex.Request), 0o644); err != nil {
		return dir, err
	}
	if err := writeJSON(filepath.Join(dir, StateFile), stateOf(ex, ns, name)); err != nil {
		return dir, err
	}
	return dir, writeJSON(filepath.Join(dir, ResponseFile), Response{Code: ex.Code, Body: jsonBody(credentials.Redact(ex.Response))})
}

// stateOf turns what the server observed into the state that reproduces it: the observed
// instance seeded as is, failed provider calls armed as faults of the same class.
func stateOf(ex hooks.Exchange, ns, name string) State {
	if ex.Hook == hooks.PoolSyncHook || ex.Hook == hooks.PoolFinalizeHook {
		return poolStateOf(ex)
	}
	in := ex.Input
	st := State{Now: ex.Now.UTC(), Provider: ex.Provider(), ProvisioningDelay: capturedDelay, HealthResync: mock.Duration(in.HealthResync)}
	if !in.ProviderKnown {
		// Configure a provider under another name, so the request meets an unconfigured one.
		st.Provider = DefaultProvider
		if ex.Provider() == DefaultProvider {
			st.Provider = DefaultProvider + "-unconfigured"
		}
	}
	if ex.ProviderType == "kubernetes" {
		// Pods come back in the request's children: nothing to seed, nothing to arm.
		st.ProviderType, st.ProvisioningDelay = "kubernetes", 0
		return withHealth(st, ex, ns, name)
	}
	if in.Instance != nil {
		st.Instances = []providers.Instance{*in.Instance}
	}
	if in.ObserveErr != nil {
		op := "get"
		if !hasProviderID(ex.Request) {
			op = "list"
		}
		st.Faults = append(st.Faults, mock.Fault{Op: op, Kind: faultKind(in.ObserveErr), Count: 1})
	}
	if o := in.Outcome; o != nil && o.Err != nil {
		st.Faults = append(st.Faults, mock.Fault{Op: strings.ToLower(string(o.Action.Kind)), Kind: faultKind(o.Err), Count: 1})
	}
	return withHealth(st, ex, ns, name)
}

// withHealth records the prober's verdict the call saw.
func withHealth(st State, ex hooks.Exchange, ns, name string) State {
	if name != "" && ex.Input.Health.State != "" {
		st.Health = map[string]Health{ns + "/" + name: healthOf(ex.Input.Health)}
	}
	return st
}

func faultKind(err error) string {
	switch providers.Class(err) {
	case providers.ErrQuotaExceeded:
		return "quota"
	case providers.ErrPermanent:
		return "permanent"
	}
	return "transient"
}

type parentMeta struct {
	Parent struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Status struct {
			ProviderID string `json:"providerID"`
		} `json:"status"`
	} `json:"parent"`
}

func parentName(req []byte) (ns, name string) {
	var m parentMeta
	if json.Unmarshal(req, &m) != nil {
		return "", ""
	}
	return m.Parent.Metadata.Namespace, m.Parent.Metadata.Name
}

func hasProviderID(req []byte) bool {
	var m parentMeta
	return json.Unmarshal(req, &m) == nil && m.Parent.Status.ProviderID != ""
}

// poolStateOf records the lease store's view a pool hook call met: the leases and cooldowns of
// its members and the pool's no-capacity count.
func poolStateOf(ex hooks.Exchange) State {
	st := State{Now: ex.Now.UTC()}
	in := ex.Pool
	if in == nil || in.Pool == nil {
		return st
	}
	for _, m := range in.Members {
		if m.Proxy == nil {
			continue
		}
		key := m.Proxy.Namespace + "/" + m.Proxy.Name
		if m.Leases > 0 {
			if st.Leases == nil {
				st.Leases = map[string]int{}
			}
			st.Leases[key] = m.Leases
		}
		if m.Cooling > 0 {
			if st.Cooling == nil {
				st.Cooling = map[string]int{}
			}
			st.Cooling[key] = m.Cooling
		}
	}
	if in.Denied > 0 {
		st.Denied = map[string]int64{in.Pool.Name: in.Denied}
	}
	return st
}
