package reliability

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// attackRelayToOwnListeners: a crawler leases a mock proxy and asks it to CONNECT to, or GET
// from, the operator's own hook and discovery listeners (issue 21: the mock proxy relayed to
// any loopback address, so a lease reached the unauthenticated hooks). The proxy must answer
// 403 for the operator's listeners and still relay to another loopback address (a canary),
// so the refusal is the destination's and not the credential's.
func attackRelayToOwnListeners(t *testing.T, c *child) {
	canary, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	go func() {
		for {
			conn, err := canary.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if req, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
					req.Body.Close()
					fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
				}
			}()
		}
	}()
	p := proxyDesc{ns: "team-a", name: "relay", uid: "uid-relay", spec: attackMockSpec(c.probeURL, "relay")}
	c.syncUntil(t, &p, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })
	code, b, err := post(c.discURL+"/v1/leases", teamAToken, []byte(`{"selector":{"geo":"relay"},"ttlSeconds":60}`))
	if err != nil || code != http.StatusOK {
		t.Fatalf("lease: %d %v %s", code, err, b)
	}
	var lease struct {
		ProxyURL string `json:"proxyURL"`
	}
	if err := json.Unmarshal(b, &lease); err != nil || lease.ProxyURL == "" {
		t.Fatalf("lease answer without a proxyURL: %v %.300s", err, b)
	}
	pu, err := url.Parse(lease.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := pu.User.Password()
	auth := "Basic " + basicAuth(pu.User.Username(), pass)
	through := func(method, dest string) (int, string) {
		conn, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
		if err != nil {
			t.Fatalf("dial the leased proxy: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(conn)
		if method == http.MethodConnect {
			fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, auth)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatalf("CONNECT %s: %v", dest, err)
			}
			if res.StatusCode != http.StatusOK {
				return res.StatusCode, ""
			}
			// Tunnelled: the forged hook call an attacker would send.
			body := `{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"legit","namespace":"team-a","uid":"x"}},"finalizing":true}`
			fmt.Fprintf(conn, "POST /finalize HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", dest, len(body), body)
			inner, err := http.ReadResponse(br, nil)
			if err != nil {
				return res.StatusCode, "tunnel: " + err.Error()
			}
			inner.Body.Close()
			return res.StatusCode, fmt.Sprintf("tunnelled call answered %d", inner.StatusCode)
		}
		fmt.Fprintf(conn, "GET http://%s/metrics HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\nConnection: close\r\n\r\n", dest, dest, auth)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET via %s: %v", dest, err)
		}
		res.Body.Close()
		return res.StatusCode, ""
	}
	hook := fmt.Sprintf("127.0.0.1:%d", c.hookPort)
	disc := strings.TrimPrefix(c.discURL, "http://")
	hookPort := hook[strings.LastIndex(hook, ":"):]
	for _, dest := range []string{hook, disc, "[::ffff:127.0.0.1]" + hookPort} {
		for _, m := range []string{http.MethodConnect, http.MethodGet} {
			if code, what := through(m, dest); code != http.StatusForbidden {
				t.Errorf("%s %s through a leased mock proxy: %d %s, want 403", m, dest, code, what)
			}
		}
	}
	for _, m := range []string{http.MethodConnect, http.MethodGet} {
		if code, _ := through(m, canary.Addr().String()); code != http.StatusOK {
			t.Errorf("%s to a loopback canary through the leased proxy: %d, want 200 (the lease's credential works)", m, code)
		}
	}
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
