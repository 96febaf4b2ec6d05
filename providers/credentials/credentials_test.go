package credentials

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
)

var parent = providers.Parent{Namespace: "crawl", Name: "eu-1", UID: "uid-1"}

// stored turns a response child into what the next sync request shows: the same object with
// a UID, as the API server stores it.
func stored(t *testing.T, child json.RawMessage, uid string) map[string]map[string]json.RawMessage {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(child, &obj); err != nil {
		t.Fatal(err)
	}
	obj["metadata"].(map[string]any)["uid"] = uid
	b, _ := json.Marshal(obj)
	return map[string]map[string]json.RawMessage{SecretTypeKey: {parent.Namespace + "/" + SecretName(parent.UID): b}}
}

func TestForManagedGeneratesThenReadsBack(t *testing.T) {
	first, err := ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Stored || first.Version != "" {
		t.Fatalf("first sync: Stored=%v Version=%q, want a credential not yet stored", first.Stored, first.Version)
	}
	if first.Credentials.Username != Username(parent.UID) || len(first.Credentials.Password) < 26 {
		t.Fatalf("generated %q / %d-byte password", first.Credentials.Username, len(first.Credentials.Password))
	}
	again, err := ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Credentials.Password == first.Credentials.Password {
		t.Fatal("two generations gave the same password: it is not random")
	}
	var s secretJSON
	if err := json.Unmarshal(first.Child, &s); err != nil {
		t.Fatal(err)
	}
	if s.Metadata.Name != SecretName(parent.UID) || s.Metadata.Namespace != "crawl" || s.Kind != "Secret" {
		t.Fatalf("child %+v", s.Metadata)
	}
	user, hash, _ := strings.Cut(strings.TrimSpace(string(s.Data[KeyHtpasswd])), ":")
	if user != first.Credentials.Username || bcrypt.CompareHashAndPassword([]byte(hash), []byte(first.Credentials.Password)) != nil {
		t.Fatalf("htpasswd line %q does not verify the password", s.Data[KeyHtpasswd])
	}

	// Every later sync reads the stored Secret back: same credential, same child.
	for range 3 {
		got, err := ForManaged(parent, stored(t, first.Child, "secret-uid-1"))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Stored || got.Version != "secret-uid-1" || got.Credentials != first.Credentials || !bytes.Equal(got.Child, first.Child) {
			t.Fatalf("read back: Stored=%v Version=%q same=%v child equal=%v", got.Stored, got.Version, got.Credentials == first.Credentials, bytes.Equal(got.Child, first.Child))
		}
	}
}

func TestForManagedDiscardsMalformed(t *testing.T) {
	key := parent.Namespace + "/" + SecretName(parent.UID)
	cases := map[string]string{
		"not json":          `{`,
		"no password":       `{"metadata":{"name":"x"},"data":{"username":"dTE=","htpasswd":"dTE6eA=="}}`,
		"htpasswd of other": `{"metadata":{"name":"x"},"data":{"username":"dTE=","password":"cA==","htpasswd":"dTI6eA=="}}`,
		"being deleted":     `{"metadata":{"name":"x","deletionTimestamp":"2026-01-01T00:00:00Z"},"data":{"username":"dTE=","password":"cA==","htpasswd":"dTE6eA=="}}`,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ForManaged(parent, map[string]map[string]json.RawMessage{SecretTypeKey: {key: json.RawMessage(raw)}})
			if err != nil {
				t.Fatal(err)
			}
			if got.Stored || got.Discarded == "" {
				t.Fatalf("Stored=%v Discarded=%q, want a new credential and a reason", got.Stored, got.Discarded)
			}
		})
	}
}

func TestForExternal(t *testing.T) {
	related := map[string]map[string]json.RawMessage{SecretTypeKey: {
		"crawl/ok":     json.RawMessage(`{"metadata":{"name":"ok"},"data":{"username":"YWxpY2U=","password":"czNjcmV0"}}`),
		"crawl/colon":  json.RawMessage(`{"metadata":{"name":"colon"},"data":{"username":"YTpi","password":"czNjcmV0"}}`),
		"crawl/nopass": json.RawMessage(`{"metadata":{"name":"nopass"},"data":{"username":"YWxpY2U="}}`),
	}}
	c, err := ForExternal("crawl", "ok", related)
	if err != nil || c != (providers.Credentials{Username: "alice", Password: "s3cret"}) {
		t.Fatalf("ok: %v %v", c, err)
	}
	for name, want := range map[string]error{"colon": ErrMalformed, "nopass": ErrMalformed, "absent": ErrMissing} {
		if _, err := ForExternal("crawl", name, related); !errors.Is(err, want) {
			t.Errorf("%s: err %v, want %v", name, err, want)
		}
	}
}

func TestRedact(t *testing.T) {
	m, err := ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"status":{"phase":"Pending"},"children":[` + string(m.Child) + `],"other":{"kind":"Secret","data":{"user-data":"I2Nsb3VkLWNvbmZpZw=="}}}`)
	got := Redact(body)
	if bytes.Contains(got, []byte(m.Credentials.Password)) || strings.Contains(string(got), "$2a$") {
		t.Fatalf("password or hash survived: %s", got)
	}
	if !bytes.Contains(got, []byte("I2Nsb3VkLWNvbmZpZw==")) {
		t.Fatalf("a Secret that holds no credentials was changed: %s", got)
	}
	if again := Redact(got); !bytes.Equal(again, got) {
		t.Fatalf("not idempotent:\n%s\n%s", got, again)
	}
	// A redacted Secret is still well formed: a replayed capture finds a stored credential.
	var resp struct{ Children []json.RawMessage }
	_ = json.Unmarshal(got, &resp)
	r, err := ForManaged(parent, stored(t, resp.Children[0], "u"))
	if err != nil || !r.Stored || r.Credentials.Password != Redacted {
		t.Fatalf("redacted secret read back: %+v %v", r, err)
	}
}

func TestCredentialsNeverPrintPassword(t *testing.T) {
	c := providers.Credentials{Username: "alice", Password: "hunter2-secret"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "creds", c, "ptr", &c)
	j, _ := json.Marshal(struct{ C *providers.Credentials }{&c})
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", struct{ C providers.Credentials }{c}),
		"%#v": fmt.Sprintf("%#v", c), "%s ptr": fmt.Sprintf("%s", &c), "slog": logs.String(), "json": string(j),
	} {
		if strings.Contains(s, c.Password) {
			t.Errorf("%s shows the password: %s", name, s)
		}
		if !strings.Contains(s, "alice") {
			t.Errorf("%s hides the username too: %s", name, s)
		}
	}
	if u := c.ProxyURL("127.0.0.1:3128").String(); u != "http://alice:hunter2-secret@127.0.0.1:3128" {
		t.Errorf("ProxyURL = %s", u)
	}
	var none *providers.Credentials
	if u := none.ProxyURL("127.0.0.1:3128").String(); u != "http://127.0.0.1:3128" {
		t.Errorf("nil ProxyURL = %s", u)
	}
}

// TestRedactSecretWithoutKind: a related (or observed) Secret keyed under Secret.v1 is
// redacted even when the object leaves out kind, as Metacontroller's maps key it by type.
func TestRedactSecretWithoutKind(t *testing.T) {
	pw := base64.StdEncoding.EncodeToString([]byte("hunter2-related"))
	body := []byte(`{"related":{"Secret.v1":{"team-a/creds":{"metadata":{"name":"creds"},"data":{"username":"YWxpY2U=","password":"` + pw + `"}}}},` +
		`"children":{"Secret.v1":{"x":{"stringData":{"username":"bob","password":"hunter3-child"}}}}}`)
	got := Redact(body)
	if bytes.Contains(got, []byte(pw)) || bytes.Contains(got, []byte("hunter3-child")) {
		t.Fatalf("password of a Secret without kind survived: %s", got)
	}
	var req struct {
		Related map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(got, &req); err != nil {
		t.Fatal(err)
	}
	c, err := ForExternal("team-a", "creds", req.Related)
	if err != nil || c.Username != "alice" || c.Password != Redacted {
		t.Fatalf("redacted related Secret read back: %+v %v", c, err)
	}
}
