package v1alpha1

import "slices"

// Default fills what the CRD schema would have defaulted. Hook bodies normally come from the
// API server already defaulted; fixtures, replays and older objects may not be.
func (s *ProxySpec) Default() {
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if s.MaxLeases == nil {
		v := DefaultMaxLeases
		s.MaxLeases = &v
	}
	if s.Vendor != nil && s.Vendor.SessionLifetimeSeconds == 0 {
		s.Vendor.SessionLifetimeSeconds = DefaultVendorSessionSeconds
	}
	if s.HealthCheck == nil {
		s.HealthCheck = &HealthCheckSpec{}
	}
	h := s.HealthCheck
	if h.ProbeURL == "" {
		h.ProbeURL = DefaultProbeURL
	}
	if h.IntervalSeconds == 0 {
		h.IntervalSeconds = DefaultIntervalSeconds
	}
	if h.TimeoutSeconds == 0 {
		h.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = DefaultFailureThreshold
	}
	if h.SuccessThreshold == 0 {
		h.SuccessThreshold = DefaultSuccessThreshold
	}
	if len(h.ExpectedStatusCodes) == 0 {
		h.ExpectedStatusCodes = slices.Clone(DefaultExpectedStatusCodes)
	}
}

// ListenPort is the port the proxy answers on: the endpoint's for External proxies.
func (s *ProxySpec) ListenPort() int32 {
	if s.Mode == ModeExternal && s.Endpoint != nil {
		return s.Endpoint.Port
	}
	if s.Port == 0 {
		return DefaultPort
	}
	return s.Port
}
