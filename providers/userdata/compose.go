package userdata

import (
	"bytes"
	"errors"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/proxy-operator/proxy-operator/providers"
)

// ErrUnsupported marks a cloud-init that cannot be combined with the credential script.
var ErrUnsupported = errors.New("cloud-init cannot carry the credential script")

// partTypes maps the first line of a cloud-init document to its MIME type, as cloud-init
// itself recognises them.
var partTypes = []struct{ prefix, mime string }{
	{"#cloud-config", "text/cloud-config"},
	{"#!", "text/x-shellscript"},
	{"#cloud-boothook", "text/cloud-boothook"},
	{"#include", "text/x-include-url"},
	{"#part-handler", "text/part-handler"},
	{"#jinja", "text/jinja2"},
}

// boundary is fixed so the same inputs give the same document (a password-free diff between
// two creates shows only what changed); it cannot occur in a part, which Compose checks.
const boundary = "proxy-operator-7d1f3c9a2b"

// Compose is the user-data of a VM on a cloud that runs only user-data: the cloud-init alone
// when there is no credential, else a MIME multipart document (which cloud-init reads) whose
// parts are the cloud-init, typed by its first line, and the credential script, which
// cloud-init runs once, after the packages the cloud-init installs.
func Compose(cloudInit string, creds *providers.Credentials) (string, error) {
	if creds == nil {
		return cloudInit, nil
	}
	script, err := CredentialScript(*creds)
	if err != nil {
		return "", err
	}
	var parts []part
	if strings.TrimSpace(cloudInit) != "" {
		typ, err := partType(cloudInit)
		if err != nil {
			return "", err
		}
		parts = append(parts, part{typ, cloudInit})
	}
	parts = append(parts, part{"text/x-shellscript", script})
	var buf bytes.Buffer
	buf.WriteString("Content-Type: multipart/mixed; boundary=\"" + boundary + "\"\nMIME-Version: 1.0\n\n")
	w := multipart.NewWriter(&buf)
	if err := w.SetBoundary(boundary); err != nil {
		return "", fmt.Errorf("user-data boundary: %w", err)
	}
	for i, p := range parts {
		if strings.Contains(p.body, boundary) {
			return "", fmt.Errorf("%w: part %d contains the MIME boundary %q", ErrUnsupported, i, boundary)
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", p.mime+"; charset=\"utf-8\"")
		h.Set("MIME-Version", "1.0")
		pw, err := w.CreatePart(h)
		if err != nil {
			return "", fmt.Errorf("user-data part: %w", err)
		}
		if _, err := pw.Write([]byte(p.body)); err != nil {
			return "", fmt.Errorf("user-data part: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("user-data: %w", err)
	}
	return buf.String(), nil
}

type part struct{ mime, body string }

// partType is the MIME type of a cloud-init document, from its first line.
func partType(cloudInit string) (string, error) {
	first, _, _ := strings.Cut(strings.TrimLeft(cloudInit, "\n"), "\n")
	first = strings.TrimSpace(first)
	if strings.HasPrefix(strings.ToLower(first), "content-type:") {
		return "", fmt.Errorf("%w: it is a MIME document already; give its parts as one #cloud-config instead", ErrUnsupported)
	}
	for _, t := range partTypes {
		if strings.HasPrefix(first, t.prefix) {
			return t.mime, nil
		}
	}
	return "", fmt.Errorf("%w: its first line %q is none cloud-init recognises (#cloud-config, #!, #cloud-boothook, #include, ...)", ErrUnsupported, trim(first, 40))
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
