package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestGatewaySubcommandFlags: the gateway subcommand needs a store and sane limits, says so,
// and never repeats a password from the URL in an error; the operator takes -gateway-*.
func TestGatewaySubcommandFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no store", []string{"gateway"}, "-lease-store is required"},
		{"not a redis URL", []string{"gateway", "-lease-store", "http://:hunter2@example.com", "-gateway-addr", "127.0.0.1:0", "-metrics-addr", "", "-discovery-insecure"}, "want redis://"},
		{"no token", []string{"gateway", "-lease-store", "redis://127.0.0.1:1", "-gateway-addr", "127.0.0.1:0"}, "no token"},
		{"bad tries", []string{"gateway", "-lease-store", "redis://127.0.0.1:1", "-gateway-max-tries", "0"}, "-gateway-max-tries 0"},
		{"no addr", []string{"gateway", "-lease-store", "redis://127.0.0.1:1", "-gateway-addr", ""}, "-gateway-addr is required"},
		{"bad rules", []string{"gateway", "-lease-store", "redis://127.0.0.1:1", "-gateway-addr", "127.0.0.1:0", "-metrics-addr", "", "-discovery-insecure", "-gateway-rules", "/nonexistent/rules.yaml"}, "gateway rules"},
		{"operator flag", []string{"gateway", "-lease-store", "redis://127.0.0.1:1", "-hook-addr", ":1"}, "unknown flag -hook-addr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DISCOVERY_TOKEN", "")
			err := dispatch(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("dispatch(%q) = %v, want an error containing %q and no password", tc.args, err, tc.wantErr)
			}
		})
	}
	c, err := parseFlags([]string{"-gateway-addr", "127.0.0.1:8091", "-gateway-max-tries", "5", "-discovery-insecure", "-hooks-insecure"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Gateway; g.Addr != "127.0.0.1:8091" || g.MaxTries != 5 || g.MaxRetryBody != 1<<20 {
		t.Errorf("operator gateway config %+v", g)
	}
	if _, err := parseFlags([]string{"-gateway-addr", ":8091", "-gateway-max-header-bytes", "5"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-gateway-max-header-bytes") {
		t.Errorf("operator with a bad gateway limit: %v", err)
	}
}
