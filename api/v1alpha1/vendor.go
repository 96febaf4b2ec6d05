package v1alpha1

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// SourceAttribute is the attribute the operator sets to SourceVendor on a vendor Proxy's
// fleet record (decision 0293). A proxy carrying it matches only a selector that names it, so
// leases and gateway requests that do not ask for bought traffic never get it.
const (
	SourceAttribute = "crawl.example.com/source"
	SourceVendor    = "vendor"
)

// DefaultVendorSessionSeconds is a vendor session's lifetime when the spec sets none.
const DefaultVendorSessionSeconds = 600

// VendorSpec makes an External Proxy a vendor's gateway (a seller of residential or mobile
// exits): one Proxy, many sticky exits, one per gateway session or request, each asked for by
// a username rendered from UsernameTemplate when the gateway dials it (decision 0293). The
// credential comes from credentialsSecretRef and never leaves the operator: vendor Proxies
// are served through the gateway only, never in a lease answer.
type VendorSpec struct {
	// UsernameTemplate renders the username of one vendor session. Placeholders: {user} (the
	// credentials Secret's username), {country} (upper case) and {countryLower}, {city},
	// {asn}, {session} (required: the sticky exit's id), {lifetimeMinutes}. A part in
	// brackets is left out when a placeholder inside it has no value: Oxylabs'
	// "customer-{user}[-cc-{country}]-sessid-{session}-sesstime-{lifetimeMinutes}", Bright
	// Data's "{user}[-country-{countryLower}]-session-{session}".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^([^{}]|[{](user|country|countryLower|city|asn|session|lifetimeMinutes)[}])*$')",message="unknown placeholder: the known are {user}, {country}, {countryLower}, {city}, {asn}, {session}, {lifetimeMinutes}"
	// +kubebuilder:validation:XValidation:rule="self.contains('{session}')",message="{session} is required (each gateway session gets its own sticky exit)"
	UsernameTemplate string `json:"usernameTemplate"`

	// Countries are the ISO 3166-1 alpha-2 codes the vendor offers; a request asking for
	// another country does not go to this vendor. Empty: any.
	// +kubebuilder:validation:MaxItems=300
	// +kubebuilder:validation:items:Pattern=`^[A-Z]{2}$`
	// +optional
	Countries []string `json:"countries,omitempty"`

	// PricePerGiB is what a GiB through the vendor costs, in the currency of the contract (a
	// decimal, "8.40"): usage reports cost with it.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,4})?$`
	// +optional
	PricePerGiB string `json:"pricePerGiB,omitempty"`

	// SessionLifetimeSeconds is how long a vendor session keeps its exit ({lifetimeMinutes}
	// rounds it up to whole minutes).
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	// +optional
	SessionLifetimeSeconds int32 `json:"sessionLifetimeSeconds,omitempty"`
}

// SessionLifetime is the spec's session lifetime, the default when unset.
func (v *VendorSpec) SessionLifetime() time.Duration {
	if v.SessionLifetimeSeconds <= 0 {
		return DefaultVendorSessionSeconds * time.Second
	}
	return time.Duration(v.SessionLifetimeSeconds) * time.Second
}

// Offers reports whether the vendor sells exits in country (any when Countries is empty).
func (v *VendorSpec) Offers(country string) bool {
	if len(v.Countries) == 0 || country == "" {
		return true
	}
	for _, c := range v.Countries {
		if strings.EqualFold(c, country) {
			return true
		}
	}
	return false
}

// ErrTemplate is wrapped by every error of a username template.
var ErrTemplate = errors.New("username template")

// ErrTemplateValue is wrapped by Render's error for a value a vendor username cannot carry.
var ErrTemplateValue = errors.New("value not allowed in a vendor username")

// UsernameValues fill a username template.
type UsernameValues struct {
	User, Country, City, ASN, Session string
	Lifetime                          time.Duration
}

var placeholders = map[string]func(UsernameValues) string{
	"user":            func(v UsernameValues) string { return v.User },
	"country":         func(v UsernameValues) string { return strings.ToUpper(v.Country) },
	"countryLower":    func(v UsernameValues) string { return strings.ToLower(v.Country) },
	"city":            func(v UsernameValues) string { return v.City },
	"asn":             func(v UsernameValues) string { return v.ASN },
	"session":         func(v UsernameValues) string { return v.Session },
	"lifetimeMinutes": func(v UsernameValues) string { return minutes(v.Lifetime) },
}

func minutes(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(int64((d+time.Minute-1)/time.Minute), 10)
}

// A value rendered into a username: the vendors split usernames on '-', so a value is letters,
// digits and '_' only ({user} is the account's own and taken as it is).
var usernameValue = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

// templatePart is literal text, a placeholder, or an optional group of them.
type templatePart struct {
	text     string
	name     string // a placeholder
	optional []templatePart
}

// parseTemplate reads a username template; its error names the first thing wrong.
func parseTemplate(t string) ([]templatePart, error) {
	var (
		group    *[]templatePart
		top      []templatePart
		session  bool
		lit      strings.Builder
		flushLit = func(into *[]templatePart) {
			if lit.Len() > 0 {
				*into = append(*into, templatePart{text: lit.String()})
				lit.Reset()
			}
		}
	)
	into := &top
	for i := 0; i < len(t); i++ {
		switch c := t[i]; c {
		case '{':
			end := strings.IndexByte(t[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%w %q: '{' at %d is never closed", ErrTemplate, t, i)
			}
			name := t[i+1 : i+end]
			if _, ok := placeholders[name]; !ok {
				return nil, fmt.Errorf("%w %q: unknown placeholder {%s} (known: {user}, {country}, {countryLower}, {city}, {asn}, {session}, {lifetimeMinutes})", ErrTemplate, t, name)
			}
			session = session || name == "session"
			flushLit(into)
			*into = append(*into, templatePart{name: name})
			i += end
		case '}':
			return nil, fmt.Errorf("%w %q: '}' at %d without '{'", ErrTemplate, t, i)
		case '[':
			if group != nil {
				return nil, fmt.Errorf("%w %q: '[' at %d inside another optional part", ErrTemplate, t, i)
			}
			flushLit(into)
			group = &[]templatePart{}
			into = group
		case ']':
			if group == nil {
				return nil, fmt.Errorf("%w %q: ']' at %d without '['", ErrTemplate, t, i)
			}
			flushLit(into)
			top = append(top, templatePart{optional: *group})
			group, into = nil, &top
		default:
			lit.WriteByte(c)
		}
	}
	if group != nil {
		return nil, fmt.Errorf("%w %q: '[' is never closed", ErrTemplate, t)
	}
	flushLit(into)
	if !session {
		return nil, fmt.Errorf("%w %q: {session} is required (each gateway session gets its own sticky exit)", ErrTemplate, t)
	}
	return top, nil
}

// Render fills the template with v. A value other than {user} that a vendor username cannot
// carry is an error wrapping ErrTemplateValue; the error never holds {user}.
func (s *VendorSpec) Render(v UsernameValues) (string, error) {
	parts, err := parseTemplate(s.UsernameTemplate)
	if err != nil {
		return "", err
	}
	if v.Lifetime <= 0 {
		v.Lifetime = s.SessionLifetime()
	}
	var b strings.Builder
	for _, p := range parts {
		if p.optional == nil {
			if _, err := renderPart(&b, p, v); err != nil {
				return "", err
			}
			continue
		}
		var g strings.Builder
		complete := true
		for _, q := range p.optional {
			ok, err := renderPart(&g, q, v)
			if err != nil {
				return "", err
			}
			complete = complete && ok
		}
		if complete {
			b.WriteString(g.String())
		}
	}
	return b.String(), nil
}

// renderPart writes one literal or placeholder; false when the placeholder has no value.
func renderPart(b *strings.Builder, p templatePart, v UsernameValues) (bool, error) {
	if p.name == "" {
		b.WriteString(p.text)
		return true, nil
	}
	val := placeholders[p.name](v)
	if p.name != "user" && !usernameValue.MatchString(val) {
		return false, fmt.Errorf("%w: {%s} %.64q: letters, digits and '_' only", ErrTemplateValue, p.name, val)
	}
	b.WriteString(val)
	return val != "", nil
}
