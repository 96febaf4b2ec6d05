package sim_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/aws"
	"github.com/proxy-operator/proxy-operator/providers/aws/ec2test"
	"github.com/proxy-operator/proxy-operator/providers/hetzner"
	"github.com/proxy-operator/proxy-operator/providers/hetzner/hcloudtest"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// simCloud is the provider a crash schedule drives and the controls of what stands in for its
// cloud: the mock provider itself, or the aws and hetzner providers with their real client
// libraries against the EC2 and Hetzner stand-ins, on the schedule's clock.
type simCloud struct {
	name     string // the provider entry's name and type, and every Proxy's spec.provider
	provider providers.Provider
	zones    []string
	// placement is a valid placement of this cloud in zone.
	placement func(zone string) *v1.PlacementSpec
	// instances are the machines that exist and are not going away, as Get would show them,
	// read from the cloud without a provider call.
	instances func() []providers.Instance
	// plant puts a managed machine of owner into the cloud, as an older operator might have
	// left, and returns its provider ID.
	plant func(name, owner string, created time.Time) string
	// terminate ends a machine behind the operator's back (a spot interruption, a host failure).
	terminate func(providers.Instance)
	// inject arms the cloud to fail f.Count calls of f.Op with its own answer of class f.Kind.
	inject func(f mock.Fault) error
	// drain disarms every fault.
	drain func()
	close func()
}

func newMockCloud(clock *driver.Clock) (*simCloud, error) {
	m, err := mock.New(mock.Config{}, mock.WithClock(clock.Now))
	if err != nil {
		return nil, err
	}
	return &simCloud{
		name: "mock", provider: m, zones: zones,
		placement: func(zone string) *v1.PlacementSpec {
			return &v1.PlacementSpec{Region: "local", Zone: zone, MachineType: "small", Image: "squid-6"}
		},
		instances: m.Instances,
		plant: func(name, owner string, created time.Time) string {
			id := mock.ID(name)
			m.Seed(providers.Instance{ID: id, Name: name, State: providers.StateRunning, OwnerUID: owner, SpecHash: "x", CreatedAt: created})
			return id
		},
		terminate: func(in providers.Instance) {
			in.State = providers.StateTerminated
			m.Seed(in)
		},
		inject: func(f mock.Fault) error { return m.Inject(f) },
		drain:  func() { drainMock(m) },
		close:  func() {},
	}, nil
}

const simRegion = "eu-central-1"

// ec2Answers are EC2's own failures by call and class. EC2 has no capacity answer to a
// describe or a terminate: a quota fault there is the throttling answer, which is transient.
var ec2Answers = map[string]map[string]struct {
	action, code string
	status       int
}{
	"create": {"quota": {"RunInstances", "InsufficientInstanceCapacity", 500}, "transient": {"RunInstances", "RequestLimitExceeded", 503}, "permanent": {"RunInstances", "InvalidSubnetID.NotFound", 400}},
	"get":    {"quota": {"DescribeInstances", "RequestLimitExceeded", 503}, "transient": {"DescribeInstances", "InternalError", 500}, "permanent": {"DescribeInstances", "UnauthorizedOperation", 403}},
	"delete": {"quota": {"TerminateInstances", "RequestLimitExceeded", 503}, "transient": {"TerminateInstances", "ServiceUnavailable", 503}, "permanent": {"TerminateInstances", "UnauthorizedOperation", 403}},
	"list":   {"quota": {"DescribeInstances", "RequestLimitExceeded", 503}, "transient": {"DescribeInstances", "InternalError", 500}, "permanent": {"DescribeInstances", "AuthFailure", 401}},
}

func newAWSCloud(clock *driver.Clock) (*simCloud, error) {
	srv := ec2test.New(clock.Now)
	p, err := aws.New(context.Background(), aws.Config{Region: simRegion},
		config.WithBaseEndpoint(srv.URL),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(ec2test.AccessKeyID, ec2test.SecretAccessKey, "")))
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &simCloud{
		name: "aws", provider: p, zones: []string{simRegion + "a", simRegion + "b", simRegion + "c"},
		placement: func(zone string) *v1.PlacementSpec {
			return &v1.PlacementSpec{Region: simRegion, Zone: zone, MachineType: "t4g.nano", Image: "ami-0a1b2c3d4e5f60718"}
		},
		instances: func() []providers.Instance {
			now := srv.Now()
			var out []providers.Instance
			for _, in := range srv.Instances() {
				st := in.State(now)
				if st != "pending" && st != "running" {
					continue
				}
				inst := providers.Instance{ID: aws.FormatID(simRegion, in.ID), Name: in.Tags["Name"], State: providers.StateProvisioning,
					OwnerUID: in.Tags[providers.TagOwnerUID], SpecHash: in.Tags[providers.TagSpecHash], CreatedAt: in.Launched}
				if st == "running" {
					inst.State, inst.IP = providers.StateRunning, in.IP
				}
				out = append(out, inst)
			}
			return out
		},
		plant: func(name, owner string, created time.Time) string {
			h := fnv.New64a()
			h.Write([]byte(name))
			id := fmt.Sprintf("i-0dead%010x", h.Sum64()&0xffffffffff)
			srv.Put(ec2test.Instance{ID: id, ImageID: "ami-0a1b2c3d4e5f60718", InstanceType: "t4g.nano", Launched: created, IP: "127.2.255.1",
				Tags: map[string]string{"Name": name, providers.TagManaged: "true", providers.TagOwnerUID: owner, providers.TagSpecHash: "x"}})
			return aws.FormatID(simRegion, id)
		},
		terminate: func(in providers.Instance) {
			_, iid, _ := aws.ParseID(in.ID)
			srv.Terminate(iid)
		},
		inject: func(f mock.Fault) error {
			a, ok := ec2Answers[f.Op][f.Kind]
			if !ok {
				return fmt.Errorf("no EC2 answer for %s/%s", f.Op, f.Kind)
			}
			srv.Fail(a.action, a.code, a.status, max(1, f.Count))
			return nil
		},
		drain: srv.ClearFaults,
		close: srv.Close,
	}, nil
}

// hcloudAnswers are the Hetzner API's own failures by call and class; a quota fault on a
// read or delete is the rate limit, which is transient.
var hcloudAnswers = map[string]struct {
	code   string
	status int
}{
	"create/quota": {"resource_limit_exceeded", 403}, "create/transient": {"server_error", 500}, "create/permanent": {"invalid_input", 400},
	"get/quota": {"rate_limit_exceeded", 429}, "get/transient": {"timeout", 504}, "get/permanent": {"forbidden", 403},
	"delete/quota": {"rate_limit_exceeded", 429}, "delete/transient": {"locked", 423}, "delete/permanent": {"protected", 403},
	"list/quota": {"rate_limit_exceeded", 429}, "list/transient": {"server_error", 500}, "list/permanent": {"unauthorized", 401},
}

func hetznerCloudIn(tokenFile string) func(*driver.Clock) (*simCloud, error) {
	return func(clock *driver.Clock) (*simCloud, error) {
		api := hcloudtest.New(clock.Now)
		p, err := hetzner.New(hetzner.Config{TokenFile: tokenFile}, hcloud.WithEndpoint(api.URL))
		if err != nil {
			api.Close()
			return nil, err
		}
		return &simCloud{
			name: "hetzner", provider: p, zones: []string{"fsn1", "nbg1", "hel1"},
			placement: func(zone string) *v1.PlacementSpec {
				return &v1.PlacementSpec{Region: "eu-central", Zone: zone, MachineType: "cx22", Image: "ubuntu-24.04"}
			},
			instances: func() []providers.Instance {
				now := api.Now()
				var out []providers.Instance
				for _, s := range api.Servers() {
					st, _ := s.Status(now)
					if st == "deleting" {
						continue
					}
					inst := providers.Instance{ID: hetzner.FormatID(s.ID), Name: s.Name, State: providers.StateProvisioning,
						OwnerUID: s.Labels[providers.TagOwnerUID], SpecHash: s.Labels[providers.TagSpecHash], CreatedAt: s.Created}
					if st == "running" {
						inst.State, inst.IP = providers.StateRunning, s.IP
					}
					out = append(out, inst)
				}
				return out
			},
			plant: func(name, owner string, created time.Time) string {
				const id = 9000001
				api.Put(hcloudtest.Server{ID: id, Name: name, ServerType: "cx22", Image: "ubuntu-24.04", Created: created, IP: "127.3.255.1",
					Labels: map[string]string{providers.TagManaged: "true", providers.TagOwnerUID: owner, providers.TagSpecHash: "x"}})
				return hetzner.FormatID(id)
			},
			terminate: func(in providers.Instance) {
				id, _ := hetzner.ParseID(in.ID)
				api.Remove(id)
			},
			inject: func(f mock.Fault) error {
				a, ok := hcloudAnswers[f.Op+"/"+f.Kind]
				if !ok {
					return fmt.Errorf("no Hetzner answer for %s/%s", f.Op, f.Kind)
				}
				api.Fail(f.Op, a.code, a.status, max(1, f.Count))
				return nil
			},
			drain: api.ClearFaults,
			close: api.Close,
		}, nil
	}
}

// TestCrashSafetyClouds plays the crash schedules of TestCrashSafety on the aws and hetzner
// providers, their real client libraries against the EC2 and Hetzner stand-ins: instances
// that take time to start and to go, names and client tokens that must adopt a lost create,
// each cloud's own error answers. Fewer schedules than the mock's, as every call is HTTP.
// CRASH_CLOUD_SCHEDULES=M changes how many; CRASH_CLOUD=aws|hetzner CRASH_SEED=N reruns one.
func TestCrashSafetyClouds(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(hcloudtest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clouds := map[string]func(*driver.Clock) (*simCloud, error){"aws": newAWSCloud, "hetzner": hetznerCloudIn(tokenFile)}
	n := envInt(t, "CRASH_CLOUD_SCHEDULES", 60)
	for _, name := range []string{"aws", "hetzner"} {
		t.Run(name, func(t *testing.T) {
			if only := os.Getenv("CRASH_CLOUD"); only != "" && only != name {
				t.Skipf("CRASH_CLOUD=%s", only)
			}
			rerun := func(seed uint64) string {
				return fmt.Sprintf("rerun just it: CRASH_CLOUD=%s CRASH_SEED=%d go test -race -count=1 -run 'TestCrashSafetyClouds$' -v ./test/sim/", name, seed)
			}
			seeds := make([]uint64, n)
			for i := range seeds {
				seeds[i] = uint64(i + 1)
			}
			if v := os.Getenv("CRASH_SEED"); v != "" {
				var seed uint64
				if _, err := fmt.Sscan(v, &seed); err != nil {
					t.Fatalf("CRASH_SEED=%q: %v", v, err)
				}
				seeds = []uint64{seed}
			}
			total := crashStats{kills: map[string]int{}, faults: map[string]int{}}
			failed := 0
			for _, seed := range seeds {
				st, trace, err := runScheduleOn(seed, clouds[name])
				total.add(st)
				if len(seeds) == 1 {
					for _, l := range trace {
						t.Log(l)
					}
				}
				if err != nil {
					failed++
					tail := trace[max(0, len(trace)-30):]
					t.Errorf("seed %d failed: %v\nlast events:\n  %s\n%s", seed, err, strings.Join(tail, "\n  "), rerun(seed))
					if failed >= 3 {
						t.Fatalf("stopping after %d failed schedules", failed)
					}
				}
			}
			t.Logf("%s: %d schedules: %d syncs, %d restarts; %d creates, %d spec changes, %d deletes; %d machines terminated by the cloud; gc deleted %d (the planted orphans); 0 duplicates, 0 leaks",
				name, total.schedules, total.syncs, total.restarts, total.creates, total.changes, total.deletes, total.terminated, total.gcDeleted)
			t.Logf("kills by point: %v", total.kills)
			t.Logf("faults injected by op/class: %v", total.faults)
			if len(seeds) > 1 && (total.kills["after-create"] == 0 || total.terminated == 0 || total.gcDeleted != total.schedules) {
				t.Errorf("the schedules proved less than they should: %d kills after a create, %d terminations, gc deleted %d of %d orphans",
					total.kills["after-create"], total.terminated, total.gcDeleted, total.schedules)
			}
		})
	}
}
