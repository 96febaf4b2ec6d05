//go:build !omit_aws

package aws

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/aws/ec2test"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

const testRegion = "eu-central-1"

// standIn starts the EC2 stand-in on a test clock and a provider whose real SDK client talks
// to it with static credentials.
func standIn(t *testing.T, cfg Config) (*Provider, *ec2test.Server, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC))
	srv := ec2test.New(clock.Now)
	t.Cleanup(srv.Close)
	if cfg.Region == "" {
		cfg.Region = testRegion
	}
	p, err := New(context.Background(), cfg,
		config.WithBaseEndpoint(srv.URL),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(ec2test.AccessKeyID, ec2test.SecretAccessKey, "")))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, srv, clock
}

// ec2Failures are EC2's own answers for each class of each call; a call with no answer of a
// class (describe is never out of capacity) is left out.
var ec2Failures = providertest.Failures{
	"create": {
		providers.ErrQuotaExceeded: {Code: "InsufficientInstanceCapacity", Status: http.StatusInternalServerError},
		providers.ErrTransient:     {Code: "RequestLimitExceeded", Status: http.StatusServiceUnavailable},
		providers.ErrPermanent:     {Code: "InvalidAMIID.NotFound", Status: http.StatusBadRequest},
	},
	"get": {
		providers.ErrTransient: {Code: "InternalError", Status: http.StatusInternalServerError},
		providers.ErrPermanent: {Code: "UnauthorizedOperation", Status: http.StatusForbidden},
	},
	"delete": {
		providers.ErrTransient: {Code: "ServiceUnavailable", Status: http.StatusServiceUnavailable},
		providers.ErrPermanent: {Code: "UnauthorizedOperation", Status: http.StatusForbidden},
	},
	"list": {
		providers.ErrTransient: {Code: "RequestLimitExceeded", Status: http.StatusServiceUnavailable},
		providers.ErrPermanent: {Code: "AuthFailure", Status: http.StatusUnauthorized},
	},
}

var ec2Actions = map[string]string{"create": "RunInstances", "get": "DescribeInstances", "delete": "TerminateInstances", "list": "DescribeInstances"}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		p, srv, clock := standIn(t, Config{})
		return providertest.Env{
			Provider:  p,
			Base:      providers.CreateRequest{Zone: testRegion + "a", MachineType: "t4g.nano", Image: "ami-0a1b2c3d4e5f60718"},
			UnknownID: FormatID(testRegion, "i-0123456789abcdef0"),
			Settle:    func() { clock.Advance(10 * time.Second) },
			Fail:      ec2Failures.Injector(func(op string, f providertest.Failure) { srv.Fail(ec2Actions[op], f.Code, f.Status, 1) }),
			Hold:      func() func() { srv.Hold(); return srv.Release },
			Foreign: func() {
				srv.Put(ec2test.Instance{ID: "i-0ffffffffffffff01", ImageID: "ami-0a1b2c3d4e5f60718", InstanceType: "t3.micro",
					Tags: map[string]string{"Name": "someone-elses-build-box"}, Launched: clock.Now()})
			},
			Vanish: func(id string) {
				_, iid, _ := ParseID(id)
				srv.Terminate(iid)
			},
			Page: func() int { srv.SetPageSize(2); return 2 }(),
		}
	})
}
