package providers

import (
	"encoding/json"
	"log/slog"
	"net/url"
)

// Credentials are the username and password a proxy demands (HTTP Basic proxy
// authentication). Every way of printing them hides the password: %v, %+v, %#v, slog and
// encoding/json all show "[redacted]". The one place the password leaves the process is a
// lease answer, which reads the fields.
type Credentials struct {
	Username string
	Password string
}

const redacted = "[redacted]"

// String hides the password.
func (c Credentials) String() string { return "{" + c.Username + " " + redacted + "}" }

// GoString hides the password from %#v.
func (c Credentials) GoString() string {
	return "Credentials{Username:" + c.Username + ", Password:" + redacted + "}"
}

// LogValue hides the password from slog.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", c.Username), slog.String("password", redacted))
}

// MarshalJSON hides the password, so a record that embeds Credentials can be dumped safely.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{c.Username, redacted})
}

// ProxyURL is the http:// URL of a proxy at hostport, with the credentials in it when c is
// not nil: what HTTP_PROXY expects. Its String() carries the password; log u.Redacted().
func (c *Credentials) ProxyURL(hostport string) *url.URL {
	u := &url.URL{Scheme: "http", Host: hostport}
	if c != nil {
		u.User = url.UserPassword(c.Username, c.Password)
	}
	return u
}
