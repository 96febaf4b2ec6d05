package server_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server"
)

// TestDiscoverySubcommandFlags: the discovery subcommand needs a store, says so, and never
// repeats a password from the URL in an error.
func TestDiscoverySubcommandFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no store", nil, "-lease-store is required"},
		{"not a redis URL", []string{"-lease-store", "http://:hunter2@example.com", "-discovery-addr", "127.0.0.1:0", "-discovery-insecure"}, "want redis://"},
		{"bad cooldowns", []string{"-lease-store", "redis://127.0.0.1:1", "-lease-max-cooldown", "1m"}, "-lease-max-cooldown"},
		{"stray argument", []string{"-lease-store", "redis://127.0.0.1:1", "extra"}, "unexpected arguments"},
		{"operator flag", []string{"-lease-store", "redis://127.0.0.1:1", "-hook-addr", ":1"}, "unknown flag -hook-addr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := server.DiscoveryCommand(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("discovery %q = %v, want an error containing %q and no password", tc.args, err, tc.wantErr)
			}
		})
	}
	if _, err := server.OperatorFlags([]string{"-lease-store", "redis://127.0.0.1:6379", "-lease-store-password-file", "/run/pw", "-hooks-insecure"}, nil, io.Discard, io.Discard); err != nil {
		t.Errorf("operator with -lease-store: %v", err)
	}
}
