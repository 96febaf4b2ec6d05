//go:build !omit_hetzner

package hetzner

import (
	"errors"
	"net/http"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/proxy-operator/proxy-operator/providers"
)

// classes maps the API's error codes onto the taxonomy: limits and capacity -> QuotaExceeded;
// rate limiting, server errors and races -> Transient; what the request got wrong (an unknown
// image or type, a bad token, a missing permission) -> Permanent.
var classes = map[hcloud.ErrorCode]error{
	hcloud.ErrorCodeNotFound:              providers.ErrNotFound,
	hcloud.ErrorCodeResourceLimitExceeded: providers.ErrQuotaExceeded,
	hcloud.ErrorCodeResourceUnavailable:   providers.ErrQuotaExceeded,
	hcloud.ErrorCodePlacementError:        providers.ErrQuotaExceeded,
	hcloud.ErrorCodeNoSpaceLeftInLocation: providers.ErrQuotaExceeded,
	hcloud.ErrorCodeRateLimitExceeded:     providers.ErrTransient,
	hcloud.ErrorCodeServerError:           providers.ErrTransient,
	hcloud.ErrorCodeServiceError:          providers.ErrTransient,
	hcloud.ErrorCodeTimeout:               providers.ErrTransient,
	hcloud.ErrorCodeBadGateway:            providers.ErrTransient,
	hcloud.ErrorCodeMaintenance:           providers.ErrTransient,
	hcloud.ErrorCodeConflict:              providers.ErrTransient,
	hcloud.ErrorCodeLocked:                providers.ErrTransient,
	hcloud.ErrorCodeRobotUnavailable:      providers.ErrTransient,
	hcloud.ErrorCodeUnknownError:          providers.ErrTransient,
	hcloud.ErrorCodeInvalidInput:          providers.ErrPermanent,
	hcloud.ErrorCodeForbidden:             providers.ErrPermanent,
	hcloud.ErrorCodeUnauthorized:          providers.ErrPermanent,
	hcloud.ErrorCodeJSONError:             providers.ErrPermanent,
	hcloud.ErrorCodeProtected:             providers.ErrPermanent,
	hcloud.ErrorCodeInvalidServerType:     providers.ErrPermanent,
	hcloud.ErrorUnsupportedError:          providers.ErrPermanent,
	hcloud.ErrorCodeResourceLocked:        providers.ErrPermanent,
}

// classify maps an error from the client onto the taxonomy. An unknown code goes by the HTTP
// status (429 and 5xx Transient, other 4xx Permanent); no answer at all (a deadline, a reset
// connection) is Transient, the class that retries.
func classify(err error) error {
	var herr hcloud.Error
	if !errors.As(err, &herr) {
		return providers.ErrTransient
	}
	if kind, ok := classes[herr.Code]; ok {
		return kind
	}
	status := 0
	if r := herr.Response(); r != nil && r.Response != nil {
		status = r.StatusCode
	}
	switch {
	case status == http.StatusTooManyRequests, status >= 500:
		return providers.ErrTransient
	case status >= 400:
		return providers.ErrPermanent
	}
	return providers.ErrTransient
}

// notFoundAs replaces NotFound with kind: on create, a 404 is the image, type or location.
func notFoundAs(got, kind error) error {
	if got == providers.ErrNotFound {
		return kind
	}
	return got
}
