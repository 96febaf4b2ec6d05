// Package replay owns hook fixtures: a folder holding one hook call exactly as Metacontroller
// sent it, the mock provider and prober state it met, and what the server answered. It loads
// a fixture, replays it through the real hook router over a seeded mock provider and a fixed
// clock, compares the answer with the golden files, and captures live traffic as new
// fixtures. It knows nothing of how the server decides; it only drives hooks.Hooks.
package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// File names inside a fixture folder.
const (
	RequestFile  = "request.json"
	StateFile    = "state.json"
	ResponseFile = "response.json"
	CallsFile    = "calls.json"
)

// DefaultProvider is the name of the mock provider a fixture configures unless it says otherwise.
const DefaultProvider = "mock"

// State is everything outside the request body that the answer depends on.
type State struct {
	// Hook is "sync", "finalize", "customize", "pools-sync" or "pools-finalize"; empty means
	// the name of the fixture's parent folder.
	Hook string `json:"hook,omitempty"`
	// Now is the fixed clock of the server and the mock provider.
	Now time.Time `json:"now"`
	// Provider names the one configured provider (default "mock"). A request naming
	// another provider meets an unconfigured one.
	Provider string `json:"provider,omitempty"`
	// ProviderType is "mock" (default) or "kubernetes": a kubernetes provider observes the
	// request's Pod children and answers desired children, so it needs no seeded instances.
	ProviderType string `json:"providerType,omitempty"`
	// ProvisioningDelay is the mock's Provisioning time (default the mock's own default).
	ProvisioningDelay mock.Duration `json:"provisioningDelay,omitempty"`
	// Instances are seeded into the mock provider before the call, exactly as given.
	Instances []providers.Instance `json:"instances,omitempty"`
	// Faults are armed in the mock provider before the call.
	Faults []mock.Fault `json:"faults,omitempty"`
	// Health is the fake prober verdict by namespace/name; absent keys are Unknown.
	Health map[string]Health `json:"health,omitempty"`
	// HealthResync is the steady-state resync handed to the decision (0: lifecycle's default).
	HealthResync mock.Duration `json:"healthResync,omitempty"`
	// MaxBodyBytes overrides the server's body limit (0: the server's default).
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// Leases, Cooling and Denied are the lease store's view for the pool hooks: live leases
	// and targets cooled down for by member namespace/name, and the no-capacity count by
	// pool name.
	Leases  map[string]int   `json:"leases,omitempty"`
	Cooling map[string]int   `json:"cooling,omitempty"`
	Denied  map[string]int64 `json:"denied,omitempty"`
}

// Health is verdict.Health with a JSON form.
type Health struct {
	State         verdict.State `json:"state"`
	LatencyMillis int64         `json:"latencyMillis,omitempty"`
	Since         time.Time     `json:"since,omitzero"`
	Reason        string        `json:"reason,omitempty"`
}

func (h Health) lifecycle() verdict.Health {
	return verdict.Health{State: h.State, LatencyMillis: h.LatencyMillis, Since: h.Since, Reason: h.Reason}
}

func healthOf(h verdict.Health) Health {
	return Health{State: h.State, LatencyMillis: h.LatencyMillis, Since: h.Since.UTC(), Reason: h.Reason}
}

// Response is the golden answer: the HTTP status and the JSON body.
type Response struct {
	Code int             `json:"code"`
	Body json.RawMessage `json:"body"`
}

// Case is one loaded fixture.
type Case struct {
	Dir     string
	Hook    string
	Request []byte
	State   State
	// Want is the golden response; nil when the folder has none yet.
	Want *Response
	// WantCalls are the golden provider calls; nil when the folder has no calls.json
	// (captured fixtures), in which case calls are not compared.
	WantCalls []mock.Call
}

// MaxFileSize bounds one fixture file: a hook body is far smaller (the hooks refuse bodies
// over a few MiB), so a larger file is a mistake or hostile, not a fixture.
const MaxFileSize = 32 << 20

// Load reads the fixture in dir.
func Load(dir string) (Case, error) {
	c := Case{Dir: dir}
	var err error
	if c.Request, err = readFile(filepath.Join(dir, RequestFile)); err != nil {
		return Case{}, fmt.Errorf("fixture %s: %w", dir, err)
	}
	if err := readJSON(filepath.Join(dir, StateFile), &c.State); err != nil {
		return Case{}, fmt.Errorf("fixture %s: %w", dir, err)
	}
	if c.State.Now.IsZero() {
		return Case{}, fmt.Errorf("fixture %s: %s: now is required", dir, StateFile)
	}
	c.Hook = c.State.Hook
	if c.Hook == "" {
		c.Hook = filepath.Base(filepath.Dir(filepath.Clean(dir)))
	}
	switch c.Hook {
	case "sync", "finalize", "customize", hooks.PoolSyncHook, hooks.PoolFinalizeHook:
	default:
		return Case{}, fmt.Errorf("fixture %s: hook %q: want sync, finalize, customize, pools-sync or pools-finalize (set state.json hook or use testdata/<hook>/<case>)", dir, c.Hook)
	}
	var want Response
	switch err := readJSON(filepath.Join(dir, ResponseFile), &want); {
	case err == nil:
		c.Want = &want
	case !errors.Is(err, os.ErrNotExist):
		return Case{}, fmt.Errorf("fixture %s: %w", dir, err)
	}
	var calls []mock.Call
	switch err := readJSON(filepath.Join(dir, CallsFile), &calls); {
	case err == nil:
		c.WantCalls = calls
		if c.WantCalls == nil {
			c.WantCalls = []mock.Call{}
		}
	case !errors.Is(err, os.ErrNotExist):
		return Case{}, fmt.Errorf("fixture %s: %w", dir, err)
	}
	return c, nil
}

// LoadAll loads every fixture under root/<hook>/<case> for the sync, finalize, customize,
// pools-sync and pools-finalize hooks, sorted by path.
// Other folders under root (other tests' fixtures) are left alone.
func LoadAll(root string) ([]Case, error) {
	var dirs []string
	for _, hook := range []string{"sync", "finalize", "customize", hooks.PoolSyncHook, hooks.PoolFinalizeHook} {
		d, err := filepath.Glob(filepath.Join(root, hook, "*", RequestFile))
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, d...)
	}
	slices.Sort(dirs)
	out := make([]Case, 0, len(dirs))
	for _, f := range dirs {
		c, err := Load(filepath.Dir(f))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// WriteGolden rewrites the fixture's response.json and calls.json from a result.
func WriteGolden(dir string, r Result) error {
	if err := writeJSON(filepath.Join(dir, ResponseFile), Response{Code: r.Code, Body: r.Body}); err != nil {
		return err
	}
	calls := r.Calls
	if calls == nil {
		calls = []mock.Call{}
	}
	return writeJSON(filepath.Join(dir, CallsFile), calls)
}

// ErrNotFixtureFile is wrapped when a fixture file is not a regular file or is too large.
var ErrNotFixtureFile = errors.New("not a fixture file")

// readFile reads a fixture file: a regular file (after symlinks) of at most MaxFileSize
// bytes. It opens without blocking, so a FIFO is refused rather than waited on, and checks
// the opened file, so nothing can be swapped in between the check and the read.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s): %w", name, fi.Mode().Type(), ErrNotFixtureFile)
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", name, MaxFileSize, ErrNotFixtureFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", name, MaxFileSize, ErrNotFixtureFile)
	}
	return b, nil
}

func readJSON(path string, v any) error {
	b, err := readFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
