// Package providertest owns the conformance suite every provider passes: the contract of
// providers.Provider (create idempotent by name, Get after Create, NotFound after Delete,
// ListByTag sees exactly the managed instances, each error class, cancellation) checked
// through a provider and the controls of the stand-in behind it. It knows no provider.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Env is one provider under test, fresh for each case, and the controls of what stands in
// for its cloud. A nil control skips the cases that need it (and the suite says so).
type Env struct {
	Provider providers.Provider
	// Base is a valid create request but for the fields the suite sets (name, owner, spec
	// hash): the zone, machine type and image this provider needs.
	Base providers.CreateRequest
	// UnknownID is a well-formed provider ID of an instance that does not exist.
	UnknownID string
	// Settle lets the cloud's asynchronous work progress by one step (advances the stand-in's
	// clock). Nil when the provider's answers never change by themselves.
	Settle func()
	// Fail makes the next call of op ("create", "get", "delete", "list") fail as the cloud
	// does for class kind (providers.ErrQuotaExceeded, ErrTransient or ErrPermanent): the
	// stand-in answers with the cloud's own error, and the provider must classify it. It
	// returns false when the cloud has no such failure for op (EC2's describe is never out of
	// capacity), and that combination is skipped.
	Fail func(op string, kind error) bool
	// Hold makes the cloud stop answering until release is called.
	Hold func() (release func())
	// Foreign puts an instance into the cloud that this operator did not make (no managed
	// tag), which ListByTag must not show.
	Foreign func()
	// Vanish ends instance id from the cloud's side (a spot reclaim, a deletion in the
	// console): Get must stop calling it Running at once and, once settled, say NotFound.
	Vanish func(id string)
	// Page is how many instances one page of the cloud's list carries (the stand-in may be
	// set to a small page for this); ListByTag must read every page. 0 skips the case.
	Page int
}

// Factory builds a fresh Env for one case; it registers its own cleanup on t.
type Factory func(t *testing.T) Env

// Kinds are the error classes a cloud's failure can map to, with their short names.
var Kinds = []struct {
	Name string
	Err  error
}{
	{"quota", providers.ErrQuotaExceeded},
	{"transient", providers.ErrTransient},
	{"permanent", providers.ErrPermanent},
}

// Ops are the provider calls Fail can make fail.
var Ops = []string{"create", "get", "delete", "list"}

const (
	uidA = "4f1c2a9e-0b7d-4e3a-9c51-2d8e6f7a1b01"
	uidB = "4f1c2a9e-0b7d-4e3a-9c51-2d8e6f7a1b02"
	uidC = "4f1c2a9e-0b7d-4e3a-9c51-2d8e6f7a1b03"
	hash = "9d3f0c1b2a4e5f60"
	// settleSteps bounds how long the suite lets a cloud work on one change.
	settleSteps = 200
)

// Request is the create request of owner uid from env's base.
func (e Env) Request(uid string) providers.CreateRequest {
	r := e.Base
	r.OwnerUID, r.SpecHash = uid, hash
	r.Name = providers.InstanceName(uid, hash)
	if r.Namespace == "" {
		r.Namespace, r.ProxyName = "crawl", "conformance"
	}
	if r.Port == 0 {
		r.Port = 3128
	}
	if r.CloudInit == "" {
		r.CloudInit = "#cloud-config\npackages: [squid]\n"
	}
	return r
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Run runs the suite, each case on a fresh Env from newEnv.
func Run(t *testing.T, newEnv Factory) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newEnv(t))
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, e Env)
}{
	{"CreateIsIdempotentByName", createIdempotent},
	{"GetAfterCreate", getAfterCreate},
	{"GetUnknownIsNotFound", getUnknown},
	{"NotFoundAfterDelete", notFoundAfterDelete},
	{"ListByTagSeesExactlyOurs", listExactlyOurs},
	{"ErrorClasses", errorClasses},
	{"CancelledContext", cancelled},
	{"DeadlineWhileCloudHangs", hanging},
	{"GetFollowsTheCloud", followsTheCloud},
	{"ListByTagReadsEveryPage", everyPage},
}

func mustCreate(t *testing.T, e Env, uid string) string {
	t.Helper()
	id, err := e.Provider.Create(ctxFor(t), e.Request(uid))
	if err != nil {
		t.Fatalf("Create(%s): %v", uid, err)
	}
	if id == "" {
		t.Fatalf("Create(%s) returned an empty ID", uid)
	}
	return id
}

// owned is the IDs ListByTag shows for uid, sorted.
func owned(t *testing.T, e Env, uid string) []string {
	t.Helper()
	all, err := e.Provider.ListByTag(ctxFor(t))
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	var out []string
	for _, in := range all {
		if in.OwnerUID == uid && in.State != providers.StateTerminated {
			out = append(out, in.ID)
		}
	}
	slices.Sort(out)
	return out
}

func createIdempotent(t *testing.T, e Env) {
	first := mustCreate(t, e, uidA)
	second := mustCreate(t, e, uidA)
	if first != second {
		t.Errorf("second Create of one name returned %q, first %q: want the same instance", second, first)
	}
	if e.Settle != nil {
		e.Settle()
	}
	third := mustCreate(t, e, uidA)
	if third != first {
		t.Errorf("Create after the cloud moved on returned %q, want %q", third, first)
	}
	if got := owned(t, e, uidA); !cmp.Equal(got, []string{first}) {
		t.Errorf("owner's instances %v after three creates, want exactly [%s]", got, first)
	}
}

// waitRunning settles the cloud until Get shows id Running with an IP.
func waitRunning(t *testing.T, e Env, id string) *providers.Instance {
	t.Helper()
	for range settleSteps {
		in, err := e.Provider.Get(ctxFor(t), id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if in.State == providers.StateRunning && in.IP != "" {
			return in
		}
		if in.State != providers.StateProvisioning {
			t.Fatalf("Get(%s) state %s while waiting for Running", id, in.State)
		}
		if e.Settle == nil {
			t.Fatalf("Get(%s) is %s and nothing can move it on (no Settle)", id, in.State)
		}
		e.Settle()
	}
	t.Fatalf("%s not Running after %d settle steps", id, settleSteps)
	return nil
}

func getAfterCreate(t *testing.T, e Env) {
	req := e.Request(uidA)
	id := mustCreate(t, e, uidA)
	in, err := e.Provider.Get(ctxFor(t), id)
	if err != nil {
		t.Fatalf("Get right after Create: %v", err)
	}
	want := providers.Instance{ID: id, Name: req.Name, OwnerUID: req.OwnerUID, SpecHash: req.SpecHash}
	got := providers.Instance{ID: in.ID, Name: in.Name, OwnerUID: in.OwnerUID, SpecHash: in.SpecHash}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get mismatch (-want +got):\n%s", diff)
	}
	if in.State != providers.StateProvisioning && in.State != providers.StateRunning {
		t.Errorf("state right after Create %s, want Provisioning or Running", in.State)
	}
	if in.State != providers.StateRunning && in.IP != "" {
		t.Errorf("a %s instance reports IP %s", in.State, in.IP)
	}
	run := waitRunning(t, e, id)
	if run.ID != id || run.OwnerUID != req.OwnerUID {
		t.Errorf("running instance %+v, want ID %s of %s", run, id, req.OwnerUID)
	}
}

func getUnknown(t *testing.T, e Env) {
	in, err := e.Provider.Get(ctxFor(t), e.UnknownID)
	if !errors.Is(err, providers.ErrNotFound) || in != nil {
		t.Errorf("Get(%s) = %+v, %v; want nil, ErrNotFound", e.UnknownID, in, err)
	}
	if err := e.Provider.Delete(ctxFor(t), e.UnknownID); err != nil {
		t.Errorf("Delete(%s) = %v; want nil (a missing instance is deleted)", e.UnknownID, err)
	}
}

// waitGone settles the cloud until Get says NotFound.
func waitGone(t *testing.T, e Env, id string) {
	t.Helper()
	for range settleSteps {
		in, err := e.Provider.Get(ctxFor(t), id)
		if errors.Is(err, providers.ErrNotFound) {
			if in != nil {
				t.Errorf("Get returned %+v with ErrNotFound, want nil", in)
			}
			return
		}
		if err != nil {
			t.Fatalf("Get(%s) after Delete: %v", id, err)
		}
		if in.State == providers.StateRunning || in.State == providers.StateProvisioning {
			t.Fatalf("Get(%s) after Delete says %s", id, in.State)
		}
		if e.Settle == nil {
			t.Fatalf("Get(%s) after Delete is %s and nothing can move it on (no Settle)", id, in.State)
		}
		e.Settle()
	}
	t.Fatalf("%s not NotFound after %d settle steps", id, settleSteps)
}

// followsTheCloud: an instance the cloud ends by itself is no longer Running for Get (it is
// Terminated, to be replaced, or already NotFound), then NotFound.
func followsTheCloud(t *testing.T, e Env) {
	if e.Vanish == nil {
		t.Skip("the stand-in cannot end an instance by itself (no Vanish)")
	}
	id := mustCreate(t, e, uidA)
	waitRunning(t, e, id)
	e.Vanish(id)
	if in, err := e.Provider.Get(ctxFor(t), id); err == nil && in.State != providers.StateTerminated {
		t.Errorf("Get of an instance the cloud ended: %s, want Terminated or NotFound", in.State)
	}
	waitGone(t, e, id)
}

// everyPage: more instances than a page are all listed.
func everyPage(t *testing.T, e Env) {
	if e.Page == 0 {
		t.Skip("no page size to exceed (Page is 0)")
	}
	want := map[string]bool{}
	for i := range e.Page + 3 {
		uid := fmt.Sprintf("%s%03d", uidA[:len(uidA)-3], i)
		want[mustCreate(t, e, uid)] = true
	}
	all, err := e.Provider.ListByTag(ctxFor(t))
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	got := map[string]bool{}
	for _, in := range all {
		got[in.ID] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListByTag over %d pages (-want +got):\n%s", (e.Page+3+e.Page-1)/e.Page, diff)
	}
}

func notFoundAfterDelete(t *testing.T, e Env) {
	id := mustCreate(t, e, uidA)
	if err := e.Provider.Delete(ctxFor(t), id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := e.Provider.Delete(ctxFor(t), id); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
	waitGone(t, e, id)
	if err := e.Provider.Delete(ctxFor(t), id); err != nil {
		t.Errorf("Delete of a gone instance: %v, want nil", err)
	}
	if got := owned(t, e, uidA); len(got) != 0 {
		t.Errorf("ListByTag still shows %v of the deleted owner", got)
	}
	// A create after the delete makes a machine again (a replacement of the same spec).
	again := mustCreate(t, e, uidA)
	if again == "" {
		t.Fatal("no instance after re-create")
	}
	waitRunning(t, e, again)
}

func listExactlyOurs(t *testing.T, e Env) {
	if e.Foreign != nil {
		e.Foreign()
	} else {
		t.Log("no Foreign control: the untagged instance is not checked")
	}
	a := mustCreate(t, e, uidA)
	b := mustCreate(t, e, uidB)
	all, err := e.Provider.ListByTag(ctxFor(t))
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	got := map[string]string{}
	for _, in := range all {
		got[in.ID] = in.OwnerUID
	}
	if diff := cmp.Diff(map[string]string{a: uidA, b: uidB}, got); diff != "" {
		t.Errorf("ListByTag mismatch (-want +got):\n%s", diff)
	}
	mine, err := providers.ListByOwner(ctxFor(t), e.Provider, uidA)
	if err != nil {
		t.Fatalf("ListByOwner: %v", err)
	}
	if len(mine) != 1 || mine[0].ID != a {
		t.Errorf("ListByOwner(%s) = %+v, want exactly %s", uidA, mine, a)
	}
	if none, err := providers.ListByOwner(ctxFor(t), e.Provider, uidC); err != nil || len(none) != 0 {
		t.Errorf("ListByOwner of an owner with nothing = %+v, %v; want none", none, err)
	}
}

// call makes one call of op against id (or a create of uid).
func call(ctx context.Context, e Env, op, uid, id string) error {
	switch op {
	case "create":
		_, err := e.Provider.Create(ctx, e.Request(uid))
		return err
	case "get":
		_, err := e.Provider.Get(ctx, id)
		return err
	case "delete":
		return e.Provider.Delete(ctx, id)
	case "list":
		_, err := e.Provider.ListByTag(ctx)
		return err
	}
	return fmt.Errorf("unknown op %q", op)
}

func errorClasses(t *testing.T, e Env) {
	if e.Fail == nil {
		t.Skip("the provider makes no call a cloud can fail (no Fail control)")
	}
	id := mustCreate(t, e, uidA)
	var creators []string
	for _, op := range Ops {
		for _, k := range Kinds {
			// Each create gets an owner of its own, so no earlier create can answer it.
			uid := fmt.Sprintf("4f1c2a9e-0b7d-4e3a-9c51-2d8e6f7a%04d", len(creators))
			creators = append(creators, uid)
			t.Run(op+"/"+k.Name, func(t *testing.T) {
				if !e.Fail(op, k.Err) {
					t.Skipf("the cloud has no %s failure of %s", k.Name, op)
				}
				err := call(ctxFor(t), e, op, uid, id)
				if !errors.Is(err, k.Err) {
					t.Fatalf("%s after a %s failure: %v (class %s), want class %s", op, k.Name, err, providers.ClassName(err), k.Name)
				}
				for _, other := range Kinds {
					if other.Err != k.Err && errors.Is(err, other.Err) {
						t.Errorf("%s error %v matches %s too", op, err, other.Name)
					}
				}
				if err := call(ctxFor(t), e, op, uid, id); err != nil && !(op == "get" && errors.Is(err, providers.ErrNotFound)) {
					t.Errorf("%s after the failure was answered: %v, want it to work again", op, err)
				}
			})
		}
	}
	for _, uid := range creators {
		if got := owned(t, e, uid); len(got) > 1 {
			t.Errorf("a failed and retried create of %s left %v, want at most one", uid, got)
		}
	}
}

func cancelled(t *testing.T, e Env) {
	id := mustCreate(t, e, uidA)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, op := range Ops {
		err := call(ctx, e, op, uidB, id)
		if op == "delete" && err == nil {
			// A provider may drop a desired child without a call (kubernetes): nothing to cancel.
			continue
		}
		if err == nil {
			t.Errorf("%s with a cancelled context succeeded", op)
			continue
		}
		if errors.Is(err, providers.ErrNotFound) || errors.Is(err, providers.ErrPermanent) {
			t.Errorf("%s with a cancelled context: %v (class %s), want a retryable class", op, err, providers.ClassName(err))
		}
	}
	if got := owned(t, e, uidB); len(got) != 0 {
		t.Errorf("a cancelled Create made %v", got)
	}
	if _, err := e.Provider.Get(ctxFor(t), id); err != nil {
		t.Errorf("Get after the cancelled calls: %v", err)
	}
}

func hanging(t *testing.T, e Env) {
	if e.Hold == nil {
		t.Skip("no Hold control: the provider calls no server")
	}
	id := mustCreate(t, e, uidA)
	release := e.Hold()
	defer release()
	for _, op := range Ops {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := call(ctx, e, op, uidB, id)
		cancel()
		if err == nil {
			t.Errorf("%s returned no error while the cloud does not answer", op)
			continue
		}
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("%s past its deadline: %v (class %s), want transient", op, err, providers.ClassName(err))
		}
	}
	release()
	if _, err := e.Provider.Get(ctxFor(t), id); err != nil {
		t.Errorf("Get once the cloud answers again: %v", err)
	}
}

// Failure is a cloud's own answer for one class of failure: its error code and HTTP status.
type Failure struct {
	Code   string
	Status int
}

// Failures are a cloud's answers for each class (providers.ErrQuotaExceeded, ErrTransient,
// ErrPermanent) of each op in Ops; a class the cloud never answers for an op is left out.
type Failures map[string]map[error]Failure

// Injector is Env.Fail for a stand-in whose inject makes its next answer to op the given
// error; it reports false (the case is skipped) for a class the cloud has no answer for.
func (f Failures) Injector(inject func(op string, fail Failure)) func(op string, kind error) bool {
	return func(op string, kind error) bool {
		fail, ok := f[op][kind]
		if ok {
			inject(op, fail)
		}
		return ok
	}
}
