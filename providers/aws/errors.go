//go:build !omit_aws

package aws

import (
	"errors"
	"net/http"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/proxy-operator/proxy-operator/providers"
)

// quotaCodes are EC2 error codes that mean "not now, and not soon": the account, the region,
// the zone or the spot market is out of something. Retry slowly.
var quotaCodes = map[string]bool{
	"InsufficientInstanceCapacity":         true,
	"InsufficientCapacity":                 true,
	"InsufficientHostCapacity":             true,
	"InsufficientFreeAddressesInSubnet":    true,
	"InstanceLimitExceeded":                true,
	"VcpuLimitExceeded":                    true,
	"MaxSpotInstanceCountExceeded":         true,
	"SpotMaxPriceTooLow":                   true,
	"ResourceLimitExceeded":                true,
	"AddressLimitExceeded":                 true,
	"VolumeLimitExceeded":                  true,
	"InsufficientReservedInstanceCapacity": true,
}

// transientCodes clear by themselves: throttling (the SDK's own retries are off, so the sync
// core's backoff is the retry), server errors, and state races.
var transientCodes = map[string]bool{
	"RequestLimitExceeded":        true,
	"Throttling":                  true,
	"ThrottlingException":         true,
	"RequestThrottled":            true,
	"InternalError":               true,
	"InternalFailure":             true,
	"ServiceUnavailable":          true,
	"Unavailable":                 true,
	"IncorrectInstanceState":      true,
	"IdempotentParameterMismatch": true,
	"DependencyViolation":         true,
	"RequestExpired":              true,
}

// classify maps an error from the SDK onto the taxonomy: InvalidInstanceID.NotFound ->
// NotFound; capacity and limit codes -> QuotaExceeded; throttling, 5xx, timeouts and
// connection errors -> Transient; other 4xx codes (a bad AMI, subnet or security group, a
// missing permission, a malformed parameter) -> Permanent. An error without a code or status
// (no credentials found, a reset connection) is Transient, the class that retries.
func classify(err error) error {
	code := errorCode(err)
	switch {
	case code == "InvalidInstanceID.NotFound":
		return providers.ErrNotFound
	case quotaCodes[code]:
		return providers.ErrQuotaExceeded
	case transientCodes[code]:
		return providers.ErrTransient
	}
	status := httpStatus(err)
	switch {
	case status == http.StatusTooManyRequests, status >= 500:
		return providers.ErrTransient
	case status >= 400, code != "" && !strings.HasPrefix(code, "Internal"):
		return providers.ErrPermanent
	}
	return providers.ErrTransient
}

// errorCode is the EC2 error code ("InvalidAMIID.NotFound"), or "".
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// httpStatus is the HTTP status of the answer, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// notFoundAs replaces NotFound with kind: for a call where an unknown instance ID cannot mean
// "the instance is gone" (run), it means the request names something that does not exist.
func notFoundAs(got, kind error) error {
	if got == providers.ErrNotFound {
		return kind
	}
	return got
}
