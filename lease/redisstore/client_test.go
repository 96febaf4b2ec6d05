package redisstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewClient(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url, file  string
		wantAddr, wantPW string
		wantTLS          bool
		wantErr          string
	}{
		{name: "plain", url: "redis://redis.example:6379/2", wantAddr: "redis.example:6379"},
		{name: "tls", url: "rediss://redis.example:6380", wantAddr: "redis.example:6380", wantTLS: true},
		{name: "password in URL", url: "redis://:s3cret@redis.example:6379", wantAddr: "redis.example:6379", wantPW: "s3cret"},
		{name: "file wins", url: "redis://:s3cret@redis.example:6379", file: pwFile, wantAddr: "redis.example:6379", wantPW: "from-file"},
		{name: "empty", url: "", wantErr: "empty"},
		{name: "wrong scheme hides the password", url: "http://:s3cret@redis.example", wantErr: "want redis://"},
		{name: "missing file is an error", url: "redis://r:6379", file: filepath.Join(dir, "nope"), wantErr: "nope does not exist"},
		{name: "unreadable file", url: "redis://r:6379", file: dir, wantErr: "password file"},
		{name: "empty file", url: "redis://r:6379", file: empty, wantErr: "is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(tc.url, tc.file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %v, want one mentioning %q and not the password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.Options()
			if o.Addr != tc.wantAddr || o.Password != tc.wantPW || (o.TLSConfig != nil) != tc.wantTLS {
				t.Errorf("addr %q password %q tls %v, want %q %q %v", o.Addr, o.Password, o.TLSConfig != nil, tc.wantAddr, tc.wantPW, tc.wantTLS)
			}
		})
	}
	if got := Redact("rediss://user:s3cret@redis.example:6380/0"); strings.Contains(got, "s3cret") || !strings.Contains(got, "redis.example:6380") {
		t.Errorf("Redact = %q", got)
	}
}
