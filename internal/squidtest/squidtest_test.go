package squidtest_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"
)

// TestStartWithBasicAuth: a Squid started with an htpasswd file answers 407 without the
// credential, 407 with a wrong one, and relays a plain request with the right one.
func TestStartWithBasicAuth(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer target.Close()
	dir := squidtest.Dir(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("crawler:"+string(hash)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := squidtest.Start(t, squidtest.Options{Htpasswd: htpasswd})
	for _, tc := range []struct {
		name string
		user *url.Userinfo
		want int
	}{
		{"no credential", nil, http.StatusProxyAuthRequired},
		{"wrong password", url.UserPassword("crawler", "nope"), http.StatusProxyAuthRequired},
		{"right credential", url.UserPassword("crawler", "s3cret"), http.StatusTeapot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := &url.URL{Scheme: "http", Host: addr, User: tc.user}
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
			res, err := c.Get(target.URL)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("status %d, want %d", res.StatusCode, tc.want)
			}
		})
	}
}
