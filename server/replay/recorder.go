package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// capturedDelay is the provisioning delay written into captured fixtures: long enough that
// a seeded Provisioning instance still shows Provisioning when the fixture is replayed,
// whatever the capturing provider's own delay was.
const capturedDelay = mock.Duration(24 * 365 * 60 * 60 * 1e9)

// DefaultCaptureMaxBytes bounds a capture directory when Recorder.MaxBytes is zero.
const DefaultCaptureMaxBytes = 100 << 20

// Redacted replaces every value of a Secret's data in a capture.
const Redacted = "UkVEQUNURUQ=" // base64 of "REDACTED", so the field stays valid Secret data

// Recorder writes every hook call the server handles as a fixture folder under
// Dir/<hook>/<time>-<seq>-<namespace>-<name>, so traffic from a real cluster can be replayed.
// It writes synchronously in the hook's path: it is a debugging aid, not for a busy fleet.
// Folders are 0700 and files 0600 (a capture holds the fleet's specs); Secret data is
// redacted unless KeepSecrets; once the directory holds MaxBytes, capture stops.
type Recorder struct {
	Dir string
	Log *slog.Logger
	// MaxBytes bounds what the directory holds, counting what was there at NewRecorder
	// (0: DefaultCaptureMaxBytes). A call that would pass it is not captured.
	MaxBytes int64
	// KeepSecrets writes Secret data as received. Off, every value of a Secret's data and
	// stringData is Redacted: a Proxy whose cloud-init comes from a Secret then replays
	// with the redacted content (and so another spec hash).
	KeepSecrets bool

	mu      sync.Mutex
	seq     int
	written int64
	full    bool
}

var _ hooks.Recorder = (*Recorder)(nil)

// NewRecorder returns a Recorder writing under dir, which it creates, or tightens to 0700 if
// it exists: captures hold hook bodies, for the operator's eyes only.
func NewRecorder(dir string, log *slog.Logger) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var used int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				used += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	return &Recorder{Dir: dir, Log: log, written: used}, nil
}

// Record implements hooks.Recorder. Failures are logged: capture never fails a hook call.
func (r *Recorder) Record(ex hooks.Exchange) {
	if len(ex.Request) == 0 {
		// Nothing to replay: the body was empty or was refused before it was read (413).
		r.Log.Debug("hook call not captured: no request body", "hook", ex.Hook, "code", ex.Code)
		return
	}
	dir, err := r.write(ex)
	if errors.Is(err, errCaptureFull) {
		return
	}
	if err != nil {
		r.Log.Error("capture failed", "hook", ex.Hook, "dir", dir, "err", err)
		return
	}
	r.Log.Debug("hook call captured", "hook", ex.Hook, "dir", dir)
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9.-]+`)

// errCaptureFull is returned once the capture directory holds MaxBytes.
var errCaptureFull = errors.New("capture directory full")

func (r *Recorder) write(ex hooks.Exchange) (string, error) {
	ns, name := parentName(ex.Request)
	// A capture never holds a proxy credential (the credentials Secret child, observed or
	// answered), whatever KeepSecrets says; other Secret data only with KeepSecrets.
	// credentials.Redact runs last, so the credentials Secret reads as replay's own redaction
	// writes it and a replayed answer still matches the captured one.
	req, resp := ex.Request, ex.Response
	if !r.KeepSecrets {
		req, resp = redactSecrets(req), redactSecrets(resp)
	}
	req, resp = credentials.Redact(req), credentials.Redact(resp)
	state, err := marshalJSON(stateOf(ex, ns, name))
	if err != nil {
		return "", err
	}
	answer, err := marshalJSON(Response{Code: ex.Code, Body: jsonBody(resp)})
	if err != nil {
		return "", err
	}
	size := int64(len(req) + len(state) + len(answer))
	limit := r.MaxBytes
	if limit <= 0 {
		limit = DefaultCaptureMaxBytes
	}
	r.mu.Lock()
	if r.written+size > limit {
		first := !r.full
		r.full = true
		r.mu.Unlock()
		if first {
			r.Log.Warn("capture stopped: directory limit reached", "dir", r.Dir, "limitBytes", limit)
		}
		return "", errCaptureFull
	}
	r.written += size
	r.seq++
	seq := r.seq
	r.mu.Unlock()

	leaf := fmt.Sprintf("%s-%06d", ex.Now.UTC().Format("20060102T150405Z"), seq)
	if name != "" {
		leaf += "-" + unsafeChars.ReplaceAllString(ns+"-"+name, "_")
	}
	dir := filepath.Join(r.Dir, ex.Hook, leaf)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return dir, err
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{RequestFile, req}, {StateFile, state}, {ResponseFile, answer}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.b, 0o600); err != nil {
			return dir, err
		}
	}
	return dir, nil
}

func marshalJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// redactSecrets replaces the data of every Secret object anywhere in a JSON body (the related
// objects of a customize-driven sync, children) with Redacted. A body without a Secret, or that
// is not JSON, is returned as it is.
func redactSecrets(body []byte) []byte {
	// "Secret" covers kind: Secret and Metacontroller's "Secret.v1" keys; stringData exists
	// only on Secrets.
	if !bytes.Contains(body, []byte(`Secret`)) && !bytes.Contains(body, []byte(`"stringData"`)) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return body
	}
	if !redact(v, false) {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

// redact redacts every Secret in v: an object of kind Secret, an object Metacontroller keys
// under a "Secret.<version>" type (related objects and children may come without kind), and
// stringData wherever it is (only a Secret has it).
func redact(v any, secret bool) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		fields := []string{"stringData"}
		if secret || x["kind"] == "Secret" {
			fields = append(fields, "data")
		}
		for _, field := range fields {
			if m, ok := x[field].(map[string]any); ok {
				for k := range m {
					m[k] = Redacted
					changed = true
				}
			}
		}
		for k, e := range x {
			if group, ok := e.(map[string]any); ok && strings.HasPrefix(k, "Secret.") {
				for _, obj := range group {
					changed = redact(obj, true) || changed
				}
				continue
			}
			changed = redact(e, false) || changed
		}
	case []any:
		for _, e := range x {
			changed = redact(e, false) || changed
		}
	}
	return changed
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
