package v1alpha1

import (
	"errors"
	"testing"
	"time"
)

const (
	oxylabs    = "customer-{user}[-cc-{country}][-city-{city}]-sessid-{session}-sesstime-{lifetimeMinutes}"
	brightData = "{user}[-country-{countryLower}][-asn-{asn}]-session-{session}"
)

func TestRenderUsername(t *testing.T) {
	tests := []struct {
		name     string
		template string
		values   UsernameValues
		want     string
		wantErr  error
	}{
		{"oxylabs with a country", oxylabs, UsernameValues{User: "acme", Country: "us", Session: "s1"}, "customer-acme-cc-US-sessid-s1-sesstime-10", nil},
		{"oxylabs without a country", oxylabs, UsernameValues{User: "acme", Session: "s1", Lifetime: 90 * time.Second}, "customer-acme-sessid-s1-sesstime-2", nil},
		{"oxylabs with a city", oxylabs, UsernameValues{User: "acme", Country: "GB", City: "london", Session: "s1"}, "customer-acme-cc-GB-city-london-sessid-s1-sesstime-10", nil},
		{"bright data", brightData, UsernameValues{User: "brd-customer-hl_1-zone-resi", Country: "US", ASN: "7922", Session: "s2"}, "brd-customer-hl_1-zone-resi-country-us-asn-7922-session-s2", nil},
		{"bright data bare", brightData, UsernameValues{User: "brd-customer-hl_1-zone-resi", Session: "s2"}, "brd-customer-hl_1-zone-resi-session-s2", nil},
		{"a dash in a value", oxylabs, UsernameValues{User: "acme", City: "new-york", Session: "s"}, "", ErrTemplateValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &VendorSpec{UsernameTemplate: tc.template}
			got, err := v.Render(tc.values)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("Render() = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestValidateVendor(t *testing.T) {
	spec := func(f func(*VendorSpec)) ProxySpec {
		v := &VendorSpec{UsernameTemplate: oxylabs, Countries: []string{"US", "DE"}, PricePerGiB: "8.40"}
		f(v)
		return ProxySpec{Mode: ModeExternal, Endpoint: &EndpointSpec{Host: "pr.oxylabs.io", Port: 7777},
			CredentialsSecretRef: &SecretRef{Name: "oxylabs"}, Vendor: v}
	}
	tests := []validateCase{
		{"oxylabs", spec(func(*VendorSpec) {}), ""},
		{"bright data", spec(func(v *VendorSpec) { v.UsernameTemplate = brightData }), ""},
		{"unknown placeholder", spec(func(v *VendorSpec) { v.UsernameTemplate = "{user}-zip-{zip}-session-{session}" }),
			`spec.vendor.usernameTemplate: "{user}-zip-{zip}-session-{session}": unknown placeholder {zip}`},
		{"no session", spec(func(v *VendorSpec) { v.UsernameTemplate = "customer-{user}" }), "{session} is required"},
		{"open brace", spec(func(v *VendorSpec) { v.UsernameTemplate = "{user-{session}" }), "unknown placeholder {user-{session}"},
		{"unclosed group", spec(func(v *VendorSpec) { v.UsernameTemplate = "{user}[-cc-{country}-{session}" }), "'[' is never closed"},
		{"nested group", spec(func(v *VendorSpec) { v.UsernameTemplate = "{user}[-a[-b]]-{session}" }), "inside another optional part"},
		{"lower-case country", spec(func(v *VendorSpec) { v.Countries = []string{"us"} }), "spec.vendor.countries"},
		{"price", spec(func(v *VendorSpec) { v.PricePerGiB = "$8" }), "spec.vendor.pricePerGiB"},
		{"lifetime", spec(func(v *VendorSpec) { v.SessionLifetimeSeconds = 5 }), "spec.vendor.sessionLifetimeSeconds"},
		{"managed", ProxySpec{Mode: ModeManaged, Provider: "mock", Vendor: &VendorSpec{UsernameTemplate: oxylabs}}, "spec.vendor: only for External proxies"},
	}
	runValidate(t, tests)
}
