package redisstore

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client timeouts: a discovery request must answer (503 at worst) well within its own write
// timeout, so no Redis call may wait long for a dead server.
const (
	dialTimeout  = 2 * time.Second
	readTimeout  = time.Second
	writeTimeout = time.Second
)

// NewClient returns a client for rawURL (redis://[user[:password]@]host:port[/db], or rediss://
// for TLS). passwordFile, when set, holds the password (a mounted Secret) and wins over one in
// the URL. A file that does not exist is an error (a wrong path would otherwise mean "no
// password" and surface later as NOAUTH, hiding the cause), and so is an empty one. Errors
// never carry the password.
func NewClient(rawURL, passwordFile string) (*redis.Client, error) {
	if rawURL == "" {
		return nil, errors.New("redis URL is empty")
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		// ParseURL's message can quote the URL: say what is wrong without it.
		return nil, fmt.Errorf("redis URL %s: want redis://host:port[/db] or rediss:// for TLS", Redact(rawURL))
	}
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("redis password file %s does not exist (without a password, give no -lease-store-password-file)", passwordFile)
		case err != nil:
			return nil, fmt.Errorf("redis password file: %w", err)
		case strings.TrimSpace(string(b)) == "":
			return nil, fmt.Errorf("redis password file %s is empty", passwordFile)
		default:
			opts.Password = strings.TrimSpace(string(b))
		}
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = dialTimeout, readTimeout, writeTimeout
	// One retry at most: a call has its own deadline, and a retry loop inside it would only
	// spend that deadline on a server that is gone.
	opts.MaxRetries = 1
	return redis.NewClient(opts), nil
}

// Redact returns rawURL without its password, fit for logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
