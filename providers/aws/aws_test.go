//go:build !omit_aws

package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/aws/ec2test"
)

const (
	testUID  = "0b6f3c2e-8a41-4f1e-9d3a-5c7e2b1f0a99"
	testHash = "3f2a9c0d1e4b5a67"
	testAMI  = "ami-0a1b2c3d4e5f60718"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createRequest() providers.CreateRequest {
	return providers.CreateRequest{
		Name: providers.InstanceName(testUID, testHash), OwnerUID: testUID, SpecHash: testHash,
		Namespace: "crawl", ProxyName: "eu-1", Zone: testRegion + "b", MachineType: "t4g.nano", Image: testAMI,
		Port: 3128, CloudInit: "#cloud-config\npackages: [squid]\n",
	}
}

func runCalls(srv *ec2test.Server) []ec2test.Call {
	var out []ec2test.Call
	for _, c := range srv.Calls() {
		if c.Action == "RunInstances" {
			out = append(out, c)
		}
	}
	return out
}

// TestRunInstancesRequest: through the real SDK, the request carries the image, type, zone,
// client token, GC tags (on the instance and its volume), a public IP on the configured
// subnet and groups, IMDSv2, spot options and the user-data with the cloud-init and the
// credential script (never the password).
func TestRunInstancesRequest(t *testing.T) {
	p, srv, _ := standIn(t, Config{SubnetID: "subnet-0a1b2c3d4e5f60718", SecurityGroupIDs: []string{"sg-0a1b2c3d4e5f60718", "sg-0f1e2d3c4b5a69788"},
		Spot: true, SpotMaxPrice: "0.0050"})
	req := createRequest()
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	req.CredentialsVersion = "0f2b7c4e-1d2a-4b5c-9e8f-7a6b5c4d3e2f"
	id, err := p.Create(testCtx(t), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := runCalls(srv)
	if len(calls) != 1 {
		t.Fatalf("%d RunInstances calls, want 1", len(calls))
	}
	got := map[string]string{}
	for k, v := range calls[0].Params {
		if k != "UserData" && k != "Version" {
			got[k] = v[0]
		}
	}
	want := map[string]string{
		"Action": "RunInstances", "ImageId": testAMI, "InstanceType": "t4g.nano", "MinCount": "1", "MaxCount": "1",
		"ClientToken": req.Name, "Placement.AvailabilityZone": testRegion + "b",
		"InstanceInitiatedShutdownBehavior":                              "terminate",
		"MetadataOptions.HttpTokens":                                     "required",
		"NetworkInterface.1.DeviceIndex":                                 "0",
		"NetworkInterface.1.AssociatePublicIpAddress":                    "true",
		"NetworkInterface.1.DeleteOnTermination":                         "true",
		"NetworkInterface.1.SubnetId":                                    "subnet-0a1b2c3d4e5f60718",
		"NetworkInterface.1.SecurityGroupId.1":                           "sg-0a1b2c3d4e5f60718",
		"NetworkInterface.1.SecurityGroupId.2":                           "sg-0f1e2d3c4b5a69788",
		"InstanceMarketOptions.MarketType":                               "spot",
		"InstanceMarketOptions.SpotOptions.SpotInstanceType":             "one-time",
		"InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior": "terminate",
		"InstanceMarketOptions.SpotOptions.MaxPrice":                     "0.0050",
	}
	tags := [][2]string{{"Name", req.Name}, {providers.TagCredentials, req.CredentialsVersion}, {providers.TagManaged, "true"},
		{providers.TagSpecHash, testHash}, {providers.TagOwnerUID, testUID}}
	for spec, typ := range []string{"instance", "volume"} {
		prefix := "TagSpecification." + string(rune('1'+spec))
		want[prefix+".ResourceType"] = typ
		for i, kv := range tags {
			want[prefix+".Tag."+string(rune('1'+i))+".Key"] = kv[0]
			want[prefix+".Tag."+string(rune('1'+i))+".Value"] = kv[1]
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RunInstances parameters mismatch (-want +got):\n%s", diff)
	}
	ud, err := base64.StdEncoding.DecodeString(calls[0].Params.Get("UserData"))
	if err != nil {
		t.Fatalf("UserData is not base64: %v", err)
	}
	if strings.Contains(string(ud), req.Credentials.Password) {
		t.Fatal("the password is in the user-data")
	}
	for _, part := range []string{"Content-Type: multipart/mixed", req.CloudInit, "Content-Type: text/x-shellscript", "printf '%s\\n' 'proxy-abc:$2a$"} {
		if !strings.Contains(string(ud), part) {
			t.Errorf("user-data lacks %q:\n%s", part, ud)
		}
	}
	insts := srv.Instances()
	if len(insts) != 1 || FormatID(testRegion, insts[0].ID) != id || !insts[0].Spot {
		t.Errorf("stand-in holds %+v, want one spot instance with ID %s", insts, id)
	}
}

// TestCreateAdoptsByName: an instance of this name and owner that an earlier create made (its
// answer lost, or an older operator) is returned, and nothing is run.
func TestCreateAdoptsByName(t *testing.T) {
	p, srv, clock := standIn(t, Config{})
	req := createRequest()
	srv.Put(ec2test.Instance{ID: "i-0abc00000000000f1", ImageID: testAMI, InstanceType: "t4g.nano", Launched: clock.Now().Add(-time.Hour),
		Tags: map[string]string{"Name": req.Name, providers.TagManaged: "true", providers.TagOwnerUID: testUID, providers.TagSpecHash: testHash}})
	id, err := p.Create(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := FormatID(testRegion, "i-0abc00000000000f1"); id != want {
		t.Errorf("Create = %s, want the existing %s", id, want)
	}
	if n := len(runCalls(srv)); n != 0 {
		t.Errorf("%d RunInstances calls, want none", n)
	}
}

// TestCreateStepsPastTerminatedToken: the client token of a name whose instance the cloud
// terminated (a spot interruption) answers with that dead instance; Create moves on to the
// next token and makes a new one, and a retry of that create is still idempotent.
func TestCreateStepsPastTerminatedToken(t *testing.T) {
	p, srv, clock := standIn(t, Config{Spot: true})
	first, err := p.Create(testCtx(t), createRequest())
	if err != nil {
		t.Fatal(err)
	}
	_, iid, _ := ParseID(first)
	srv.Terminate(iid)
	clock.Advance(time.Hour)
	if _, err := p.Get(testCtx(t), first); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("Get of the terminated instance: %v, want NotFound", err)
	}
	second, err := p.Create(testCtx(t), createRequest())
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("Create after termination returned the dead instance %s", first)
	}
	// The describe that would adopt it is blind for a moment (eventual consistency): the
	// retried token still finds the same instance.
	srv.Fail("DescribeInstances", "InternalError", http.StatusInternalServerError, 0)
	third, err := p.Create(testCtx(t), createRequest())
	if err == nil || third != "" {
		t.Fatalf("Create while describe fails = %q, %v; want a transient error", third, err)
	}
	third, err = p.Create(testCtx(t), createRequest())
	if err != nil || third != second {
		t.Errorf("retried Create = %q, %v; want %s", third, err, second)
	}
	if n := len(srv.Instances()); n != 2 {
		t.Errorf("%d instances, want the dead one and its replacement", n)
	}
}

// TestCreateWithMismatchedTokenReadsItsInstance: a credential script differs on every call
// (its bcrypt salt), so a retried token answers IdempotentParameterMismatch; the instance the
// token made is read by its token, not made twice.
func TestCreateWithMismatchedTokenReadsItsInstance(t *testing.T) {
	p, srv, _ := standIn(t, Config{})
	req := createRequest()
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	first, err := p.Create(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	// Hide it from the name lookup, as a describe that lags behind the run.
	_, iid, _ := ParseID(first)
	in := srv.Instances()[0]
	delete(in.Tags, "Name")
	srv.Put(in)
	second, err := p.Create(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if second != first || len(srv.Instances()) != 1 {
		t.Errorf("second Create = %s with %d instances, want %s (%s) alone", second, len(srv.Instances()), first, iid)
	}
}

// TestErrorCodes: EC2's codes, through the real SDK's parsing, land in their class.
func TestErrorCodes(t *testing.T) {
	tests := []struct {
		code   string
		status int
		want   error
	}{
		{"InsufficientInstanceCapacity", 500, providers.ErrQuotaExceeded},
		{"VcpuLimitExceeded", 400, providers.ErrQuotaExceeded},
		{"InstanceLimitExceeded", 400, providers.ErrQuotaExceeded},
		{"MaxSpotInstanceCountExceeded", 400, providers.ErrQuotaExceeded},
		{"InsufficientFreeAddressesInSubnet", 400, providers.ErrQuotaExceeded},
		{"RequestLimitExceeded", 503, providers.ErrTransient},
		{"InternalError", 500, providers.ErrTransient},
		{"Unavailable", 503, providers.ErrTransient},
		{"SomethingNew", 502, providers.ErrTransient},
		{"InvalidAMIID.NotFound", 400, providers.ErrPermanent},
		{"InvalidSubnetID.NotFound", 400, providers.ErrPermanent},
		{"InvalidGroup.NotFound", 400, providers.ErrPermanent},
		{"UnauthorizedOperation", 403, providers.ErrPermanent},
		{"AuthFailure", 401, providers.ErrPermanent},
		{"InvalidParameterValue", 400, providers.ErrPermanent},
		{"OptInRequired", 401, providers.ErrPermanent},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			p, srv, _ := standIn(t, Config{})
			srv.Fail("RunInstances", tc.code, tc.status, 1)
			_, err := p.Create(testCtx(t), createRequest())
			if providers.Class(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Create after %s: %v (class %s), want class %v naming the code", tc.code, err, providers.ClassName(err), tc.want)
			}
		})
	}
}

// TestRefusedWithoutCall: requests no instance can be made from fail as Permanent, saying
// which field, and the stand-in sees no call.
func TestRefusedWithoutCall(t *testing.T) {
	tests := map[string]struct {
		edit func(*providers.CreateRequest)
		want string
	}{
		"no image":            {func(r *providers.CreateRequest) { r.Image = "" }, "placement.image is required"},
		"not an AMI":          {func(r *providers.CreateRequest) { r.Image = "ubuntu-24.04" }, `placement.image "ubuntu-24.04" is not an AMI ID`},
		"no type":             {func(r *providers.CreateRequest) { r.MachineType = "" }, "placement.machineType is required"},
		"other region":        {func(r *providers.CreateRequest) { r.Zone = "us-east-1a" }, `placement.zone "us-east-1a" is not a zone of region "eu-central-1"`},
		"region differs":      {func(r *providers.CreateRequest) { r.Region = "us-east-1" }, `placement.region "us-east-1" differs`},
		"user-data too large": {func(r *providers.CreateRequest) { r.CloudInit = "#cloud-config\n#" + strings.Repeat("x", 17<<10) }, "user-data is"},
		"not cloud-init": {func(r *providers.CreateRequest) {
			r.CloudInit = "packages: [squid]"
			r.Credentials = &providers.Credentials{Username: "u", Password: "p"}
		}, "cloud-init cannot carry the credential script"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, srv, _ := standIn(t, Config{})
			req := createRequest()
			tc.edit(&req)
			if err := p.CheckCreate(req); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckCreate: %v, want Permanent saying %q", err, tc.want)
			}
			if _, err := p.Create(testCtx(t), req); !errors.Is(err, providers.ErrPermanent) {
				t.Errorf("Create: %v, want Permanent", err)
			}
			if n := len(srv.Calls()); n != 0 {
				t.Errorf("%d calls, want none", n)
			}
		})
	}
}

func TestForeignIDs(t *testing.T) {
	p, srv, _ := standIn(t, Config{})
	for _, id := range []string{"gcp://p/z/n", "aws://eu-central-1/vol-123", "aws://us-east-1/i-0123456789abcdef0", "aws://eu-central-1/"} {
		if _, err := p.Get(testCtx(t), id); !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("Get(%s): %v, want Permanent", id, err)
		}
		if err := p.Delete(testCtx(t), id); !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("Delete(%s): %v, want Permanent", id, err)
		}
	}
	if n := len(srv.Calls()); n != 0 {
		t.Errorf("%d calls for IDs that are not this provider's, want none", n)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"ok":               {Config{Region: "eu-central-1", Spot: true, SpotMaxPrice: "0.01"}, ""},
		"no region":        {Config{}, "aws: region is required (e.g. eu-central-1)"},
		"bad subnet":       {Config{Region: "eu-central-1", SubnetID: "default"}, `aws: subnetId "default" is not a subnet ID (subnet-0123abcd...)`},
		"price not spot":   {Config{Region: "eu-central-1", SpotMaxPrice: "0.01"}, "aws: spotMaxPrice is set but spot is not"},
		"price not number": {Config{Region: "eu-central-1", Spot: true, SpotMaxPrice: "cheap"}, `aws: spotMaxPrice "cheap" is not a price in USD (e.g. "0.0050")`},
		"bad profile":      {Config{Region: "eu-central-1", Profile: "a b"}, `aws: profile "a b" is not a profile name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate = %q, want %q", got, tc.want)
			}
		})
	}
}
