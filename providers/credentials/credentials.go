// Package credentials owns the credential of each proxy: the generated username and password
// of a Managed proxy, kept in a Secret that is a Metacontroller child of its Proxy, and the
// user's Secret an External proxy names. It builds and reads those Secrets as JSON; it never
// talks to the API server and knows nothing of providers' machines.
package credentials

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
)

// SecretTypeKey is how Metacontroller keys observed Secrets (children and related objects).
const SecretTypeKey = "Secret.v1"

// Keys of a credentials Secret. A Managed proxy's Secret has all three; an External proxy's
// needs only username and password.
const (
	KeyUsername = "username"
	KeyPassword = "password"
	// KeyHtpasswd is "username:bcrypt(password)", the file Squid's basic_ncsa_auth reads.
	KeyHtpasswd = "htpasswd"
)

// Labels and annotations of a generated Secret, so `kubectl get secrets -l` finds them.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	LabelComponent  = "app.kubernetes.io/component"
	AnnotationProxy = "crawl.example.com/proxy"
)

// BcryptCost is the work factor of the htpasswd line: the least bcrypt allows. A work factor
// slows the guessing of a weak password from a leaked hash; these passwords are 128 random
// bits, which no amount of guessing reaches, so a higher cost would only slow every sync that
// generates one (and Squid's first check of each credential).
const BcryptCost = bcrypt.MinCost

// Errors a caller can match.
var (
	ErrMalformed = errors.New("credentials secret is malformed")
	ErrMissing   = errors.New("credentials secret not found")
)

// SecretName is the name of a Managed Proxy's credentials Secret: a function of the Proxy's
// UID (as its instance name is), so every sync finds the same one and a recreated Proxy gets a
// new one.
func SecretName(uid string) string { return providers.InstanceName(uid, "") + "-credentials" }

// Username is the generated username of a Managed Proxy. It is not secret; the password is.
func Username(uid string) string { return providers.InstanceName(uid, "") }

// Managed is the credential of one Managed Proxy as a sync sees it.
type Managed struct {
	Credentials providers.Credentials
	// Stored says the Secret exists in the cluster (the sync request showed it). Until it
	// does, the credential is a fresh one that may never be stored, so no machine may be
	// given it.
	Stored bool
	// Version changes whenever the stored Secret is replaced (it is the Secret's UID): a
	// provider that bakes the credential into its machine hashes it. Empty until Stored.
	Version string
	// Child is the Secret to return in the sync response: the stored one unchanged, or the
	// one to create.
	Child json.RawMessage
	// Discarded says why an observed Secret was not used (it is left out of the response, so
	// Metacontroller deletes it and the next sync makes a new one); empty otherwise.
	Discarded string
}

// secretJSON is the part of a Secret this package reads and writes.
type secretJSON struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   secretMeta        `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
}

type secretMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
}

// ForManaged returns the credential of the Managed Proxy parent: read back from its Secret
// when the sync request shows it, else newly generated. The password comes from crypto/rand
// and nothing else, so it cannot be derived from anything public; it is stable because every
// later sync reads it back from the stored Secret rather than generating again.
func ForManaged(parent providers.Parent, observed map[string]map[string]json.RawMessage) (Managed, error) {
	name := SecretName(parent.UID)
	var discarded string
	if raw, ok := lookup(observed[SecretTypeKey], parent.Namespace, name); ok {
		m, err := readManaged(raw, parent)
		if err == nil {
			return m, nil
		}
		discarded = err.Error()
	}
	c := providers.Credentials{Username: Username(parent.UID), Password: rand.Text()}
	hash, err := bcrypt.GenerateFromPassword([]byte(c.Password), BcryptCost)
	if err != nil {
		return Managed{}, fmt.Errorf("credentials: hash password: %w", err)
	}
	child, err := json.Marshal(desired(parent, name, map[string][]byte{
		KeyUsername: []byte(c.Username),
		KeyPassword: []byte(c.Password),
		KeyHtpasswd: []byte(c.Username + ":" + string(hash) + "\n"),
	}))
	if err != nil {
		return Managed{}, fmt.Errorf("credentials: %w", err)
	}
	return Managed{Credentials: c, Child: child, Discarded: discarded}, nil
}

// desired is the Secret to return for parent with data.
func desired(parent providers.Parent, name string, data map[string][]byte) secretJSON {
	return secretJSON{
		APIVersion: "v1",
		Kind:       "Secret",
		Metadata: secretMeta{
			Name:      name,
			Namespace: parent.Namespace,
			Labels: map[string]string{
				LabelManagedBy:        "proxy-operator",
				LabelComponent:        "proxy-credentials",
				providers.TagOwnerUID: parent.UID,
			},
			Annotations: map[string]string{AnnotationProxy: parent.Name},
		},
		Type: "Opaque",
		Data: data,
	}
}

// readManaged checks a stored Secret and returns it as the response child.
func readManaged(raw json.RawMessage, parent providers.Parent) (Managed, error) {
	var s secretJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		return Managed{}, fmt.Errorf("%w: %s/%s: %w", ErrMalformed, parent.Namespace, SecretName(parent.UID), err)
	}
	if s.Metadata.DeletionTimestamp != nil {
		return Managed{}, fmt.Errorf("%w: %s/%s is being deleted", ErrMissing, parent.Namespace, s.Metadata.Name)
	}
	c, err := read(s, parent.Namespace)
	if err != nil {
		return Managed{}, err
	}
	if h := string(s.Data[KeyHtpasswd]); !strings.HasPrefix(h, c.Username+":") || strings.Count(strings.TrimSpace(h), "\n") != 0 {
		return Managed{}, fmt.Errorf("%w: %s/%s: key %q is not one line for user %q", ErrMalformed, parent.Namespace, s.Metadata.Name, KeyHtpasswd, c.Username)
	}
	child, err := json.Marshal(desired(parent, s.Metadata.Name, map[string][]byte{
		KeyUsername: s.Data[KeyUsername],
		KeyPassword: s.Data[KeyPassword],
		KeyHtpasswd: s.Data[KeyHtpasswd],
	}))
	if err != nil {
		return Managed{}, fmt.Errorf("credentials: %w", err)
	}
	version := s.Metadata.UID
	if version == "" {
		// A request from a fixture or an older Metacontroller without the UID: the content
		// identifies the Secret as well (the htpasswd line carries a random salt).
		version = "h" + providers.InstanceName(string(s.Data[KeyHtpasswd]), "")[len("proxy-"):]
	}
	return Managed{Credentials: c, Stored: true, Version: version, Child: child}, nil
}

// read returns the username and password of a credentials Secret.
func read(s secretJSON, namespace string) (providers.Credentials, error) {
	c := providers.Credentials{Username: string(s.Data[KeyUsername]), Password: string(s.Data[KeyPassword])}
	if err := Validate(c); err != nil {
		return providers.Credentials{}, fmt.Errorf("%w: %s/%s: %w", ErrMalformed, namespace, s.Metadata.Name, err)
	}
	return c, nil
}

// MaxLen bounds a username or password read from a Secret.
const MaxLen = 256

// Validate says what makes c unusable as HTTP Basic proxy credentials.
func Validate(c providers.Credentials) error {
	for _, f := range []struct{ key, v string }{{KeyUsername, c.Username}, {KeyPassword, c.Password}} {
		switch {
		case f.v == "":
			return fmt.Errorf("key %q is missing or empty", f.key)
		case len(f.v) > MaxLen:
			return fmt.Errorf("key %q is longer than %d bytes", f.key, MaxLen)
		case strings.ContainsFunc(f.v, func(r rune) bool { return r < 0x21 || r == 0x7f }):
			return fmt.Errorf("key %q holds whitespace or control characters", f.key)
		}
	}
	if strings.Contains(c.Username, ":") {
		return fmt.Errorf("key %q holds a colon", KeyUsername)
	}
	return nil
}

// ForExternal reads the credentials Secret an External Proxy names from the related objects of
// a sync request (the customize hook asks for exactly that Secret).
func ForExternal(namespace, name string, related map[string]map[string]json.RawMessage) (providers.Credentials, error) {
	raw, ok := lookup(related[SecretTypeKey], namespace, name)
	if !ok {
		return providers.Credentials{}, fmt.Errorf("%w: %s/%s", ErrMissing, namespace, name)
	}
	var s secretJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		return providers.Credentials{}, fmt.Errorf("%w: %s/%s: %w", ErrMalformed, namespace, name, err)
	}
	s.Metadata.Name = name
	return read(s, namespace)
}

// lookup finds an object keyed "namespace/name" (hook v2) or "name" (v1).
func lookup(objs map[string]json.RawMessage, namespace, name string) (json.RawMessage, bool) {
	if raw, ok := objs[namespace+"/"+name]; ok {
		return raw, true
	}
	raw, ok := objs[name]
	return raw, ok
}

// Redacted is what replaces a password (and any other secret value) in a capture.
const Redacted = "[redacted]"

// Redact returns body with the credentials of every credentials Secret in it (one with a
// password or htpasswd key) replaced: the password by Redacted, the htpasswd line by
// "username:[redacted]". A Secret is an object of kind Secret or any object under a
// "Secret.v1" key (Metacontroller's children and related maps), kind or not. The username stays, so a redacted capture still replays: the Secret
// it shows is well formed. Other Secrets (cloud-init) are left alone, as before credentials
// existed. A body that is not JSON is returned as is, since it cannot hold a decoded Secret.
func Redact(body []byte) []byte {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return body
	}
	if !redactAny(v) {
		return body
	}
	out, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return out
}

// redactAny redacts in place and reports whether it changed anything.
func redactAny(v any) bool {
	changed := false
	switch t := v.(type) {
	case map[string]any:
		if t["kind"] == "Secret" {
			changed = redactSecret(t) || changed
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if k == SecretTypeKey {
				// Metacontroller's children and related maps key objects by type; a
				// Secret there is one whether or not it repeats its kind.
				if objs, ok := t[k].(map[string]any); ok {
					for _, o := range objs {
						if s, ok := o.(map[string]any); ok && s["kind"] != "Secret" {
							changed = redactSecret(s) || changed
						}
					}
				}
			}
			changed = redactAny(t[k]) || changed
		}
	case []any:
		for _, e := range t {
			changed = redactAny(e) || changed
		}
	}
	return changed
}

func redactSecret(s map[string]any) bool {
	changed := false
	for _, field := range []string{"data", "stringData"} {
		data, ok := s[field].(map[string]any)
		if !ok {
			continue
		}
		b64 := field == "data"
		user := decodeValue(data[KeyUsername], b64)
		want := map[string]string{KeyPassword: Redacted, KeyHtpasswd: user + ":" + Redacted + "\n"}
		for k, w := range want {
			v, ok := data[k]
			if !ok || decodeValue(v, b64) == w {
				continue
			}
			data[k] = encodeValue(w, b64)
			changed = true
		}
	}
	return changed
}

// decodeValue reads a Secret value; data values are base64, stringData values plain.
func decodeValue(v any, b64 bool) string {
	str, _ := v.(string)
	if !b64 {
		return str
	}
	b, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		return ""
	}
	return string(b)
}

func encodeValue(v string, b64 bool) string {
	if !b64 {
		return v
	}
	return base64.StdEncoding.EncodeToString([]byte(v))
}
