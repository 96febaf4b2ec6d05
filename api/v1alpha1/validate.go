package v1alpha1

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// The CRD's patterns for a Secret reference, repeated for bodies that skipped the API server.
var (
	secretName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	secretKey  = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
)

var pricePerGiB = regexp.MustCompile(`^[0-9]{1,6}(\.[0-9]{1,4})?$`)

var secretNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// Validate repeats the CRD's schema and CEL rules for bodies that did not pass through the
// API server, and checks what the schema cannot. It reports every offending field, one per
// line (errors.Join), each named by its path (spec.endpoint.port: ...); nil when the spec holds.
func (s *ProxySpec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("spec.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch s.Mode {
	case ModeManaged:
		if s.Provider == "" {
			bad("provider", "required when mode is Managed")
		}
		if s.Endpoint != nil {
			bad("endpoint", "must be absent when mode is Managed")
		}
	case ModeExternal:
		if s.Provider != "" {
			bad("provider", "must be empty when mode is External")
		}
		if s.Endpoint == nil {
			bad("endpoint", "required when mode is External")
		} else {
			if strings.TrimSpace(s.Endpoint.Host) == "" {
				bad("endpoint.host", "required")
			} else if err := ValidHost(s.Endpoint.Host); err != nil {
				bad("endpoint.host", "%q is not an IP address or a DNS name", s.Endpoint.Host)
			}
			if s.Endpoint.Port < 1 || s.Endpoint.Port > 65535 {
				bad("endpoint.port", "%d is not a port (1-65535)", s.Endpoint.Port)
			}
		}
	case "":
		bad("mode", "required (Managed or External)")
	default:
		bad("mode", "%q is not Managed or External", s.Mode)
	}
	if r := s.CredentialsSecretRef; r != nil {
		if s.Mode != ModeExternal {
			bad("credentialsSecretRef", "only for External proxies: a Managed proxy gets a generated credential")
		}
		if !secretNameRE.MatchString(r.Name) || len(r.Name) > 253 {
			bad("credentialsSecretRef.name", "%q is not a Secret name", r.Name)
		}
	}
	if v := s.Vendor; v != nil {
		if s.Mode != ModeExternal || s.CredentialsSecretRef == nil {
			bad("vendor", "only for External proxies with a credentialsSecretRef (the vendor account)")
		}
		if len(v.UsernameTemplate) > 256 {
			bad("vendor.usernameTemplate", "%d characters, at most 256", len(v.UsernameTemplate))
		} else if _, err := parseTemplate(v.UsernameTemplate); err != nil {
			bad("vendor.usernameTemplate", "%s", strings.TrimPrefix(err.Error(), ErrTemplate.Error()+" "))
		}
		for _, c := range v.Countries {
			if len(c) != 2 || strings.ToUpper(c) != c || !usernameValue.MatchString(c) {
				bad("vendor.countries", "%.8q is not an ISO 3166-1 alpha-2 code in upper case", c)
			}
		}
		if v.PricePerGiB != "" && !pricePerGiB.MatchString(v.PricePerGiB) {
			bad("vendor.pricePerGiB", "%.20q is not a decimal price (8.40)", v.PricePerGiB)
		}
		if v.SessionLifetimeSeconds != 0 && (v.SessionLifetimeSeconds < 60 || v.SessionLifetimeSeconds > 86400) {
			bad("vendor.sessionLifetimeSeconds", "%d is out of range 60-86400", v.SessionLifetimeSeconds)
		}
	}
	if s.Port < 0 || s.Port > 65535 {
		bad("port", "%d is not a port (1-65535)", s.Port)
	}
	if s.MaxLeases != nil && (*s.MaxLeases < 0 || *s.MaxLeases > MaxMaxLeases) {
		bad("maxLeases", "%d is out of range 0-%d", *s.MaxLeases, MaxMaxLeases)
	}
	if len(s.Attributes) > MaxAttributes {
		bad("attributes", "%d attributes, at most %d", len(s.Attributes), MaxAttributes)
	} else {
		for _, k := range slices.Sorted(maps.Keys(s.Attributes)) {
			switch {
			case k == "" || len(k) > MaxAttributeKeyLength:
				bad("attributes", "name %.64q is not 1-%d characters", k, MaxAttributeKeyLength)
			case len(s.Attributes[k]) > MaxAttributeValueLength:
				bad("attributes["+k+"]", "value of %d characters, at most %d", len(s.Attributes[k]), MaxAttributeValueLength)
			}
		}
	}
	if c := s.CloudInit; c != nil {
		if (c.Inline != nil) == (c.SecretRef != nil) {
			bad("cloudInit", "exactly one of inline or secretRef must be set")
		}
		if r := c.SecretRef; r != nil && (r.Name == "" || r.Key == "") {
			bad("cloudInit.secretRef", "name and key are required")
		} else if r != nil && !secretName.MatchString(r.Name) {
			bad("cloudInit.secretRef.name", "%q is not a Secret name (a DNS subdomain; a Secret of another namespace cannot be named)", r.Name)
		} else if r != nil && !secretKey.MatchString(r.Key) {
			bad("cloudInit.secretRef.key", "%q is not a Secret key (letters, digits, '-', '_', '.')", r.Key)
		}
	}
	if h := s.HealthCheck; h != nil {
		if h.ProbeURL != "" {
			u, err := url.Parse(h.ProbeURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("healthCheck.probeURL", "%q must be an absolute http:// or https:// URL", h.ProbeURL)
			}
		}
		if h.IntervalSeconds < 0 || h.IntervalSeconds > 3600 {
			bad("healthCheck.intervalSeconds", "%d is out of range 1-3600", h.IntervalSeconds)
		}
		if h.TimeoutSeconds < 0 || h.TimeoutSeconds > 60 {
			bad("healthCheck.timeoutSeconds", "%d is out of range 1-60", h.TimeoutSeconds)
		}
		if h.IntervalSeconds > 0 && h.TimeoutSeconds > h.IntervalSeconds {
			bad("healthCheck.timeoutSeconds", "%d must not exceed intervalSeconds %d", h.TimeoutSeconds, h.IntervalSeconds)
		}
		if h.FailureThreshold < 0 || h.FailureThreshold > 100 {
			bad("healthCheck.failureThreshold", "%d is out of range 1-100", h.FailureThreshold)
		}
		if h.SuccessThreshold < 0 || h.SuccessThreshold > 100 {
			bad("healthCheck.successThreshold", "%d is out of range 1-100", h.SuccessThreshold)
		}
		for _, c := range h.ExpectedStatusCodes {
			if c < 100 || c > 599 {
				bad("healthCheck.expectedStatusCodes", "%d is not an HTTP status code", c)
			}
		}
	}
	if v := s.Verify; v != nil {
		if v.ExitURL != "" {
			u, err := url.Parse(v.ExitURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("verify.exitURL", "%q must be an absolute http:// or https:// URL", v.ExitURL)
			}
		}
		if len(v.ExpectedExit) > 16 {
			bad("verify.expectedExit", "%d entries, at most 16", len(v.ExpectedExit))
		}
		for _, e := range v.ExpectedExit {
			if _, err := ParsePrefix(e); err != nil {
				bad("verify.expectedExit", "%q is not an IP address or CIDR", e)
			}
		}
		if v.OnMismatch != "" && v.OnMismatch != MismatchExclude && v.OnMismatch != MismatchReport {
			bad("verify.onMismatch", "%q is not Exclude or Report", v.OnMismatch)
		}
	}
	return errors.Join(errs...)
}

// ParsePrefix reads an expectedExit entry: an address (a /32 or /128) or a CIDR.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ErrInvalidHost is returned for a host that is neither an IP address nor a DNS name.
var ErrInvalidHost = errors.New("invalid host")

// ValidHost reports whether host is an IP address or a DNS name (RFC 1123 labels), the only
// things a proxy endpoint may name. It says nothing about whether the policy allows it.
func ValidHost(host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	h := strings.TrimSuffix(host, ".")
	if h == "" || len(h) > 253 {
		return fmt.Errorf("%w %q: want an IP address or a DNS name of 1 to 253 characters", ErrInvalidHost, host)
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%w %q: want an IP address or a DNS name (labels of 1 to 63 letters, digits and inner '-')", ErrInvalidHost, host)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w %q: want an IP address or a DNS name (labels of 1 to 63 letters, digits and inner '-')", ErrInvalidHost, host)
			}
		}
	}
	return nil
}
