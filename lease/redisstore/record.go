package redisstore

import (
	"encoding/json"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

// record is a fleet.Proxy as stored in Redis. fleet.Credentials redacts its password in JSON
// (so a record can be dumped or logged safely), but a discovery replica must hand the real
// credential out in a lease answer: the record carries it in a field of its own, and the
// embedded Proxy's Credentials is left nil. Redis therefore holds proxy passwords; the README
// says to protect it like a Secret.
type record struct {
	fleet.Proxy
	Secret *secret `json:"secret,omitempty"`
}

type secret struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// encodeProxy is the stored form of p.
func encodeProxy(p fleet.Proxy) ([]byte, error) {
	r := record{Proxy: p}
	if c := p.Credentials; c != nil {
		r.Secret = &secret{Username: c.Username, Password: c.Password}
	}
	r.Proxy.Credentials = nil
	return json.Marshal(r)
}

// decodeProxy reads what encodeProxy stored.
func decodeProxy(b []byte) (fleet.Proxy, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return fleet.Proxy{}, err
	}
	p := r.Proxy
	p.Credentials = nil
	if r.Secret != nil {
		p.Credentials = &fleet.Credentials{Username: r.Secret.Username, Password: r.Secret.Password}
	}
	return p, nil
}
