package access

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const yamlTokens = `# two teams and a dashboard
tokens:
  - name: team-a
    token: team-a-token-aaaaaaaaaa
    namespaces: [team-a]
    right: lease
  - name: dash
    token: dashboards-token-ddddddd
    namespaces: ["*"]
    right: read
`

func TestParseAndAuthenticate(t *testing.T) {
	toks, err := Parse([]byte(yamlTokens))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		header   string
		wantErr  error
		wantName string
	}{
		{"team token", "Bearer team-a-token-aaaaaaaaaa", nil, "team-a"},
		{"scheme case and spaces", "bearer  dashboards-token-ddddddd ", nil, "dash"},
		{"no header", "", ErrNoToken, ""},
		{"basic", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", ErrNoToken, ""},
		{"empty bearer", "Bearer ", ErrNoToken, ""},
		{"wrong token", "Bearer team-a-token-aaaaaaaaab", ErrInvalidToken, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/proxies", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			c, err := toks.Authenticate(r)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Authenticate: %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "aaaa") {
				t.Errorf("error %q shows the token", err)
			}
			if tc.wantName != "" && (c == nil || c.Name != tc.wantName) {
				t.Errorf("caller %+v, want %s", c, tc.wantName)
			}
		})
	}
}

func TestRights(t *testing.T) {
	toks, err := Parse([]byte(yamlTokens))
	if err != nil {
		t.Fatal(err)
	}
	team, dash := toks.entries[0].caller, toks.entries[1].caller
	oncall := &Caller{Name: "on-call", Namespaces: []string{"team-a"}, Right: RightAdmin}
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"team reads its namespace", team.MayRead("team-a"), true},
		{"team cannot read another", team.MayRead("team-b"), false},
		{"team leases its namespace", team.MayLease("team-a"), true},
		{"team cannot lease another", team.MayLease("team-b"), false},
		{"dashboard reads everything", dash.MayRead("team-b"), true},
		{"dashboard cannot lease", dash.MayLease("team-b"), false},
		{"dashboard has no lease right", dash.MayLeaseSomewhere(), false},
		{"nil caller may nothing", (*Caller)(nil).MayRead("x"), false},
		{"insecure may lease anywhere", Insecure.MayLease("x"), true},
		{"team is no admin", team.MayAdmin("team-a"), false},
		{"dashboard is no admin", dash.MayAdminSomewhere(), false},
		{"an admin leases", oncall.MayLease("team-a"), true},
		{"an admin acts in its namespace", oncall.MayAdmin("team-a"), true},
		{"an admin does not act in another", oncall.MayAdmin("team-b"), false},
		{"an admin does not read another", oncall.MayRead("team-b"), false},
		{"insecure is an admin everywhere", Insecure.MayAdmin("x"), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if ns := team.LeaseNamespaces(); len(ns) != 1 || ns[0] != "team-a" {
		t.Errorf("team lease namespaces %v", ns)
	}
	if ns := Insecure.LeaseNamespaces(); ns != nil {
		t.Errorf("insecure lease namespaces %v, want nil (all)", ns)
	}
}

func TestLineForm(t *testing.T) {
	toks, err := Parse([]byte("# comment\n\nfirst-token-1234\n  second-token-5678  \n"))
	if err != nil || toks.Len() != 2 {
		t.Fatalf("Parse: %v, %v tokens", err, toks)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer second-token-5678")
	c, err := toks.Authenticate(r)
	if err != nil || !c.MayLease("any") {
		t.Errorf("line token: %+v, %v; want lease rights everywhere", c, err)
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"empty file", "", "no token"},
		{"only comments", "# nothing\n\n", "no token"},
		{"blank yaml token", "tokens:\n  - {name: a, token: '  ', namespaces: [x], right: read}\n", "token 1 (a): blank token"},
		{"space in token", "tokens:\n  - {name: a, token: 'a b', namespaces: [x], right: read}\n", "whitespace"},
		{"one character", "tokens:\n  - {name: a, token: aaaaaaaaaaaaaaaa, namespaces: [x], right: read}\n", "token 1 (a): a token must hold at least 6 different characters, this one has 1"},
		{"two characters", "abababababababababab\n", "token 1 (line-token-1): a token must hold at least 6 different characters, this one has 2"},
		{"no name", "tokens:\n  - {token: abc-0123456789abcdef, namespaces: [x], right: read}\n", "name is required"},
		{"duplicate name", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read}\n  - {name: a, token: abd-0123456789abcdef, namespaces: [x], right: read}\n", "duplicate name"},
		{"duplicate token", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read}\n  - {name: b, token: abc-0123456789abcdef, namespaces: [x], right: read}\n", "same token"},
		{"no namespaces", "tokens:\n  - {name: a, token: abc-0123456789abcdef, right: read}\n", "namespaces is required"},
		{"bad right", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: root}\n", `right "root": want read, lease or admin`},
		{"unknown field", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read, admin: true}\n", "unknown field"},
		{"duplicate line token", "abc-0123456789abcdef\nabc-0123456789abcdef\n", "same token"},
		{"allowlist of a read token", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read, allowlist: [10.0.0.0/8]}\n", "only a token with the lease right"},
		{"allowlist not a CIDR", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, allowlist: [10.0.0.0/33]}\n", `allowlist "10.0.0.0/33"`},
		{"allowlist of every address", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, allowlist: ['::/0']}\n", "every address"},
		{"ports of a read token", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read, ports: [{addr: ':8101', protocol: http}]}\n", "only a token with the lease right"},
		{"port protocol", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, ports: [{addr: ':8101', protocol: socks4}]}\n", `protocol "socks4"`},
		{"port twice", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, ports: [{addr: ':8101', protocol: http}]}\n  - {name: b, token: abd-0123456789abcdef, namespaces: [x], right: lease, ports: [{addr: ':8101', protocol: socks5}]}\n", "port :8101 is token a's too"},
		{"budget of a read token", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: read, budgets: [{source: '*', period: day, bytes: 1}]}\n", "budgets: only a token with the lease right"},
		{"budget source", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, budgets: [{source: oxylabs, period: day, bytes: 1}]}\n", `budget source "oxylabs"`},
		{"budget period", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, budgets: [{source: '*', period: week, bytes: 1}]}\n", `period "week"`},
		{"budget bytes", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, budgets: [{source: '*', period: day, bytes: 0}]}\n", "bytes must be at least 1"},
		{"budget twice", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, budgets: [{source: ns/v, period: day, bytes: 1}, {source: ns/v, period: day, bytes: 2}]}\n", "two budgets for ns/v per day"},
		{"allowlists overlap", "tokens:\n  - {name: a, token: abc-0123456789abcdef, namespaces: [x], right: lease, allowlist: [10.1.0.0/16]}\n  - {name: b, token: abd-0123456789abcdef, namespaces: [x], right: lease, allowlist: [10.1.2.3]}\n", "overlaps token a's 10.1.0.0/16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "abc") {
				t.Errorf("error %q shows a token", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(yamlTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if toks, err := Load(p); err != nil || toks.Len() != 2 {
		t.Fatalf("Load: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Load of a missing file: no error")
	}
}

// TestShortTokenRefused: a token shorter than MinTokenLen is refused when the set is built
// (at start), by a message naming the rule and the entry, never the token.
func TestShortTokenRefused(t *testing.T) {
	for _, file := range []string{"x\n", "tokens:\n  - {name: a, token: short-tok-12345, namespaces: [x], right: read}\n"} {
		_, err := Parse([]byte(file))
		if err == nil || !strings.Contains(err.Error(), "at least 16 characters") {
			t.Errorf("Parse(%q): %v, want a refusal naming the 16-character minimum", file, err)
		}
		if err != nil && strings.Contains(err.Error(), "short-tok") {
			t.Errorf("error %q carries the token", err)
		}
	}
	if _, err := Parse([]byte("exactly-16-chars\n")); err != nil {
		t.Errorf("a 16-character token: %v", err)
	}
}

// TestAllowlist: a source address in a token's allowlist names that token (an IPv4-mapped
// address too); any other names none.
func TestAllowlist(t *testing.T) {
	tk, err := Parse([]byte("tokens:\n  - {name: office, token: abc-0123456789abcdef, namespaces: [x], right: lease, allowlist: [192.0.2.0/24, '2001:db8::1']}\n" +
		"  - {name: ci, token: abd-0123456789abcdef, namespaces: [y], right: lease, allowlist: ['::ffff:198.51.100.0/120']}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.77", "office"}, {"::ffff:192.0.2.1", "office"}, {"2001:db8::1", "office"}, {"2001:db8::2", ""},
		{"198.51.100.9", "ci"}, {"198.51.101.9", ""}, {"127.0.0.1", ""},
	} {
		got := ""
		if c := tk.BySource(netip.MustParseAddr(tc.addr)); c != nil {
			got = c.Name
		}
		if got != tc.want {
			t.Errorf("BySource(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
