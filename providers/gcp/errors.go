//go:build !omit_gcp

package gcp

import (
	"errors"
	"net/http"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/proxy-operator/proxy-operator/providers"
)

// quotaReasons are the error reasons (HTTP error items, ErrorInfo reasons and operation error
// codes, compared case-insensitively) that mean "not now, and not soon": the project or zone is
// out of something, or the API is throttling us.
var quotaReasons = map[string]bool{
	"quotaexceeded":                             true,
	"ratelimitexceeded":                         true,
	"userratelimitexceeded":                     true,
	"dailylimitexceeded":                        true,
	"rate_limit_exceeded":                       true,
	"resource_exhausted":                        true,
	"quota_exceeded":                            true,
	"zone_resource_pool_exhausted":              true,
	"zone_resource_pool_exhausted_with_details": true,
}

// transientReasons are 4xx reasons that clear by themselves, e.g. deleting an instance whose
// previous operation is still running.
var transientReasons = map[string]bool{
	"resourcenotready":   true,
	"resource_not_ready": true,
	"conditionnotmet":    true,
}

// errAlreadyExists marks an operation that failed because the instance exists already.
var errAlreadyExists = errors.New("instance already exists")

// classify maps an error from the client library onto the taxonomy: 404 -> NotFound; quota
// and rate-limit reasons and 429 -> QuotaExceeded; 5xx, timeouts and connection errors ->
// Transient; other 4xx (invalid argument, permission denied) -> Permanent. Anything it cannot
// read (a body that does not parse, say) is Transient, the class that retries.
func classify(err error) error {
	code, reasons := details(err)
	for _, r := range reasons {
		if quotaReasons[strings.ToLower(r)] {
			return providers.ErrQuotaExceeded
		}
	}
	for _, r := range reasons {
		if transientReasons[strings.ToLower(r)] {
			return providers.ErrTransient
		}
	}
	switch {
	case code == http.StatusNotFound:
		return providers.ErrNotFound
	case code == http.StatusTooManyRequests:
		return providers.ErrQuotaExceeded
	case code == http.StatusConflict, code == http.StatusPreconditionFailed, code == http.StatusRequestTimeout:
		return providers.ErrTransient
	case code >= 500:
		return providers.ErrTransient
	case code >= 400:
		return providers.ErrPermanent
	}
	// No HTTP status: a deadline, a refused or reset connection, a body that does not parse.
	return providers.ErrTransient
}

// httpCode is the HTTP status of an API error, or 0.
func httpCode(err error) int {
	code, _ := details(err)
	return code
}

// details reads the status code and the error reasons from either error shape the library
// returns: *googleapi.Error (REST) or *apierror.APIError wrapping one.
func details(err error) (code int, reasons []string) {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		code = gerr.Code
		for _, item := range gerr.Errors {
			reasons = append(reasons, item.Reason)
		}
	}
	var aerr *apierror.APIError
	if errors.As(err, &aerr) {
		if code == 0 {
			code = aerr.HTTPCode()
		}
		if r := aerr.Reason(); r != "" {
			reasons = append(reasons, r)
		}
	}
	return code, reasons
}

// notFoundAs replaces NotFound with kind: for calls where a 404 cannot mean "the instance is
// gone" (insert, list), it means the request names something that does not exist.
func notFoundAs(got, kind error) error {
	if got == providers.ErrNotFound {
		return kind
	}
	return got
}

// operationError is the error an operation already carries when the API answered with it, or nil.
func operationError(o *computepb.Operation) error {
	items := o.GetError().GetErrors()
	if len(items) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(items))
	exists := false
	for _, e := range items {
		msgs = append(msgs, e.GetCode()+": "+e.GetMessage())
		if e.GetCode() == "RESOURCE_ALREADY_EXISTS" {
			exists = true
		}
	}
	msg := "operation " + o.GetName() + " failed: " + strings.Join(msgs, "; ")
	if exists {
		return errors.Join(errAlreadyExists, errors.New(msg))
	}
	return errors.New(msg)
}

// operationClass classifies a failed operation by its error codes and HTTP status.
func operationClass(o *computepb.Operation) error {
	for _, e := range o.GetError().GetErrors() {
		if quotaReasons[strings.ToLower(e.GetCode())] {
			return providers.ErrQuotaExceeded
		}
	}
	switch code := o.GetHttpErrorStatusCode(); {
	case code == http.StatusTooManyRequests:
		return providers.ErrQuotaExceeded
	case code >= 500:
		return providers.ErrTransient
	}
	return providers.ErrPermanent
}
