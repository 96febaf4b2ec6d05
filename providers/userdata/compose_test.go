package userdata

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
)

type mimePart struct{ Type, Body string }

var testCreds = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}

// parts reads a user-data document the way cloud-init does: a MIME message whose
// multipart/mixed body holds typed parts.
func parts(t *testing.T, doc string) []mimePart {
	t.Helper()
	msg, err := mail.ReadMessage(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("user-data is not a MIME message: %v\n%s", err, doc)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/mixed" {
		t.Fatalf("Content-Type %q: %v", msg.Header.Get("Content-Type"), err)
	}
	var out []mimePart
	r := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("next part: %v", err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		typ, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		out = append(out, mimePart{typ, string(b)})
	}
}

func TestComposeCarriesCloudInitAndCredentialScript(t *testing.T) {
	tests := []struct {
		name, cloudInit, wantType string
	}{
		{"cloud-config", "#cloud-config\npackages: [squid]\n", "text/cloud-config"},
		{"shell script", "#!/bin/sh\napt-get install -y squid\n", "text/x-shellscript"},
		{"boothook", "#cloud-boothook\necho hi\n", "text/cloud-boothook"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := Compose(tc.cloudInit, testCreds)
			if err != nil {
				t.Fatalf("Compose: %v", err)
			}
			if strings.Contains(doc, testCreds.Password) {
				t.Fatal("the password is in the user-data")
			}
			got := parts(t, doc)
			if len(got) != 2 {
				t.Fatalf("%d parts, want the cloud-init and the credential script: %+v", len(got), got)
			}
			if diff := cmp.Diff(mimePart{tc.wantType, tc.cloudInit}, got[0]); diff != "" {
				t.Errorf("cloud-init part mismatch (-want +got):\n%s", diff)
			}
			if got[1].Type != "text/x-shellscript" {
				t.Errorf("second part is %s, want text/x-shellscript", got[1].Type)
			}
			checkScript(t, got[1].Body)
		})
	}
}

// checkScript: the script installs a bcrypt line verifying the password and the auth
// fragment, and is valid POSIX shell.
func checkScript(t *testing.T, script string) {
	t.Helper()
	m := regexp.MustCompile(`printf '%s\\n' '(proxy-abc:[^']+)' > ` + regexp.QuoteMeta(HtpasswdPath)).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no htpasswd line in the script:\n%s", script)
	}
	_, hash, _ := strings.Cut(m[1], ":")
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(testCreds.Password)); err != nil {
		t.Errorf("htpasswd line does not verify the password: %v", err)
	}
	if !strings.Contains(script, AuthConfig(HtpasswdPath)) {
		t.Errorf("script lacks the auth fragment:\n%s", script)
	}
	if out, err := exec.Command("/bin/sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
}

func TestComposeWithoutCredentialIsTheCloudInit(t *testing.T) {
	const ci = "#cloud-config\npackages: [squid]\n"
	got, err := Compose(ci, nil)
	if err != nil || got != ci {
		t.Errorf("Compose(ci, nil) = %q, %v; want the cloud-init unchanged", got, err)
	}
}

func TestComposeOnlyCredential(t *testing.T) {
	doc, err := Compose("", testCreds)
	if err != nil {
		t.Fatal(err)
	}
	got := parts(t, doc)
	if len(got) != 1 || got[0].Type != "text/x-shellscript" {
		t.Fatalf("parts %+v, want the credential script alone", got)
	}
	checkScript(t, got[0].Body)
}

func TestComposeRefuses(t *testing.T) {
	tests := []struct{ name, cloudInit, want string }{
		{"mime already", "Content-Type: multipart/mixed; boundary=x\n\n--x\n", "MIME document already"},
		{"no cloud-init header", "packages: [squid]\n", `first line "packages: [squid]"`},
		{"boundary inside", "#cloud-config\n# " + boundary + "\n", "contains the MIME boundary"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compose(tc.cloudInit, testCreds)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrUnsupported saying %q", err, tc.want)
			}
		})
	}
}
