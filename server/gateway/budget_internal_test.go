package gateway

import "testing"

// TestConnCapFor: each client connection may need an upstream descriptor, and a quarter of the
// limit (at least 256) stays for the other listeners (issue 30: 20,000 connections at the
// default limit stalled hooks and discovery).
func TestConnCapFor(t *testing.T) {
	for _, tc := range []struct{ nofile, want int }{
		{1024, 384},
		{4096, 1536},
		{65536, 24576},
		{1 << 20, 393216},
		{100, 16},
	} {
		if got := connCapFor(tc.nofile); got != tc.want {
			t.Errorf("connCapFor(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
		if got := connCapFor(tc.nofile); tc.nofile > 512 && 2*got+256 > tc.nofile {
			t.Errorf("connCapFor(%d) = %d leaves fewer than 256 descriptors", tc.nofile, got)
		}
	}
}
