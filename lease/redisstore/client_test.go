package redisstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
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
			c, err := NewClient(ClientConfig{URL: tc.url, PasswordFile: tc.file})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrClientConfig) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %v, want one mentioning %q and not the password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.(*redis.Client).Options()
			if o.Addr != tc.wantAddr || o.Password != tc.wantPW || (o.TLSConfig != nil) != tc.wantTLS {
				t.Errorf("addr %q password %q tls %v, want %q %q %v", o.Addr, o.Password, o.TLSConfig != nil, tc.wantAddr, tc.wantPW, tc.wantTLS)
			}
		})
	}
	if got := Redact("rediss://user:s3cret@redis.example:6380/0"); strings.Contains(got, "s3cret") || !strings.Contains(got, "redis.example:6380") {
		t.Errorf("Redact = %q", got)
	}
}

// TestClientTopologies: the Sentinel and Cluster URL forms reach go-redis's options as the
// documented form says, and a malformed one is refused naming what is wrong.
func TestClientTopologies(t *testing.T) {
	type got struct {
		Topology         Topology
		Addrs            []string
		Master, Password string
		SentinelPassword string
		DB               int
		TLS              bool
	}
	tests := []struct {
		name, url string
		want      got
		wantErr   string
	}{
		{name: "sentinel", url: "redis+sentinel://:s3cret@s1:26379,s2:26379/mymaster/2?addr=s3:26379",
			want: got{Topology: Sentinel, Addrs: []string{"s1:26379", "s2:26379", "s3:26379"}, Master: "mymaster", Password: "s3cret", DB: 2}},
		{name: "sentinel tls", url: "rediss+sentinel://s1:26379/m",
			want: got{Topology: Sentinel, Addrs: []string{"s1:26379"}, Master: "m", TLS: true}},
		{name: "cluster", url: "redis+cluster://:s3cret@n1:7000,n2:7001?addr=n3:7002",
			want: got{Topology: Cluster, Addrs: []string{"n1:7000", "n2:7001", "n3:7002"}, Password: "s3cret"}},
		{name: "cluster tls", url: "rediss+cluster://n1:7000", want: got{Topology: Cluster, Addrs: []string{"n1:7000"}, TLS: true}},
		{name: "sentinel without master", url: "redis+sentinel://:s3cret@s1:26379", wantErr: "names its master set"},
		{name: "cluster with a db", url: "redis+cluster://n1:7000/3", wantErr: "only database 0"},
		{name: "unknown topology", url: "redis+ring://:s3cret@n1:7000", wantErr: "want redis://"},
		{name: "single with two hosts", url: "redis://:s3cret@a:1,b:2", wantErr: "more than one address"},
		{name: "unknown sentinel option", url: "redis+sentinel://:s3cret@s1:26379/m?bogus=1", wantErr: "want redis+sentinel://"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseClientConfig(ClientConfig{URL: tc.url})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrClientConfig) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %v, want one mentioning %q and not the password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g got
			switch {
			case o.failover != nil:
				f := o.failover
				g = got{Topology: Sentinel, Addrs: f.SentinelAddrs, Master: f.MasterName, Password: f.Password,
					SentinelPassword: f.SentinelPassword, DB: f.DB, TLS: f.TLSConfig != nil}
			case o.cluster != nil:
				c := o.cluster
				g = got{Topology: Cluster, Addrs: c.Addrs, Password: c.Password, TLS: c.TLSConfig != nil}
			default:
				t.Fatalf("parsed as a single server: %+v", o.single)
			}
			if d := cmp.Diff(tc.want, g); d != "" {
				t.Errorf("mismatch (-want +got):\n%s", d)
			}
			if TopologyOf(tc.url) != tc.want.Topology {
				t.Errorf("TopologyOf = %s, want %s", TopologyOf(tc.url), tc.want.Topology)
			}
		})
	}
}

// TestClientTLSFiles: TLS files are refused on a plain URL, a CA file without a certificate
// and half a client key pair are errors naming the file's role.
func TestClientTLSFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     ClientConfig
		wantErr string
	}{
		{name: "files on a plain URL", cfg: ClientConfig{URL: "redis://r:6379", CAFile: notPEM}, wantErr: "not rediss://"},
		{name: "CA without PEM", cfg: ClientConfig{URL: "rediss://r:6379", CAFile: notPEM}, wantErr: "holds no PEM certificate"},
		{name: "missing CA", cfg: ClientConfig{URL: "rediss://r:6379", CAFile: filepath.Join(dir, "nope")}, wantErr: "redis CA file"},
		{name: "cert without key", cfg: ClientConfig{URL: "rediss://r:6379", CertFile: notPEM}, wantErr: "both the certificate and the key"},
		{name: "unreadable pair", cfg: ClientConfig{URL: "rediss://r:6379", CertFile: notPEM, KeyFile: notPEM}, wantErr: "client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewClient(tc.cfg)
			if !errors.Is(err, ErrClientConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want ErrClientConfig mentioning %q", err, tc.wantErr)
			}
		})
	}
}
