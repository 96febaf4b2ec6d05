package providers

import (
	"errors"
	"fmt"
)

// The error taxonomy. Providers wrap every error they return around one of these, so the sync
// core can branch with errors.Is without knowing which cloud it talks to.
var (
	// ErrNotFound: the instance does not exist. A normal answer from Get.
	ErrNotFound = errors.New("instance not found")
	// ErrQuotaExceeded: retry slowly (at least five minutes).
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrTransient: retry with backoff.
	ErrTransient = errors.New("transient provider error")
	// ErrPermanent: retrying the same spec will not help; the Proxy is Failed until its spec changes.
	ErrPermanent = errors.New("permanent provider error")
)

// Wrap marks err as belonging to the class kind (one of the sentinels), keeping both matchable
// with errors.Is. op names the operation, e.g. "gcp insert".
func Wrap(kind error, op string, err error) error {
	if err == nil {
		return fmt.Errorf("%s: %w", op, kind)
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}

// Class returns the sentinel err belongs to; an unclassified error counts as transient, the
// class that retries without giving up.
func Class(err error) error {
	for _, kind := range []error{ErrNotFound, ErrQuotaExceeded, ErrPermanent, ErrTransient} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return ErrTransient
}

// ClassName is a short stable name for a class, for metrics labels and condition reasons.
func ClassName(err error) string {
	if err == nil {
		return "ok"
	}
	switch Class(err) {
	case ErrNotFound:
		return "not_found"
	case ErrQuotaExceeded:
		return "quota"
	case ErrPermanent:
		return "permanent"
	default:
		return "transient"
	}
}

// Omitted is the error of a provider the binary was built without (-tags omit_<name>, as make
// build, make run and make demo build it: decision 0282). name is the provider type, title
// the cloud's own name.
func Omitted(name, title string) error {
	return fmt.Errorf("%s: this binary was built with -tags omit_%s, without the %s client; build it without that tag (make build GO_TAGS=) or run the container image, which carries every provider", name, name, title)
}
