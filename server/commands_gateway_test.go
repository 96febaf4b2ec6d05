package server_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server"
)

// TestGatewaySubcommandFlags: the gateway subcommand needs a store and sane limits, says so,
// and never repeats a password from the URL in an error; the operator takes -gateway-*.
func TestGatewaySubcommandFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no store", nil, "-lease-store is required"},
		{"not a redis URL", []string{"-lease-store", "http://:hunter2@example.com", "-gateway-addr", "127.0.0.1:0", "-metrics-addr", "", "-discovery-insecure"}, "want redis://"},
		{"no token", []string{"-lease-store", "redis://127.0.0.1:1", "-gateway-addr", "127.0.0.1:0"}, "no token"},
		{"bad tries", []string{"-lease-store", "redis://127.0.0.1:1", "-gateway-max-tries", "0"}, "-gateway-max-tries 0"},
		{"no addr", []string{"-lease-store", "redis://127.0.0.1:1", "-gateway-addr", ""}, "-gateway-addr is required"},
		{"bad rules", []string{"-lease-store", "redis://127.0.0.1:1", "-gateway-addr", "127.0.0.1:0", "-metrics-addr", "", "-discovery-insecure", "-gateway-rules", "/nonexistent/rules.yaml"}, "gateway rules"},
		{"operator flag", []string{"-lease-store", "redis://127.0.0.1:1", "-hook-addr", ":1"}, "unknown flag -hook-addr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DISCOVERY_TOKEN", "")
			err := server.GatewayCommand(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("gateway %q = %v, want an error containing %q and no password", tc.args, err, tc.wantErr)
			}
		})
	}
	c, err := server.OperatorFlags([]string{"-gateway-addr", "127.0.0.1:8091", "-gateway-max-tries", "5", "-discovery-insecure", "-hooks-insecure"}, nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Gateway; g.Addr != "127.0.0.1:8091" || g.MaxTries != 5 || g.MaxRetryBody != 1<<20 {
		t.Errorf("operator gateway config %+v", g)
	}
	if _, err := server.OperatorFlags([]string{"-gateway-addr", ":8091", "-gateway-max-header-bytes", "5"}, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-gateway-max-header-bytes") {
		t.Errorf("operator with a bad gateway limit: %v", err)
	}
}
