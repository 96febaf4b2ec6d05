package gateway

import (
	"fmt"
	"net"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// tokenPort is a token's own listener (decision 0279): a connection to it that gives no
// password is the token's, and one that gives no username selects with the port's.
type tokenPort struct {
	caller *access.Caller
	sel    Selection
}

// PortListener bounds ln as Listener does (the same connection bound and memory budget), as
// the token's own port p: serve it with Server (p.Protocol http) or SOCKSServer (socks5). A
// username the grammar refuses is an error naming the port.
func (g *Gateway) PortListener(ln net.Listener, p access.Port) (net.Listener, error) {
	g.once.Do(g.init)
	sel, err := ParseUsername(p.Username)
	if err != nil {
		return nil, fmt.Errorf("token %s's port %s: %w", p.Caller.Name, p.Addr, err)
	}
	return &limitListener{Listener: ln, g: g, overload: overloaded, port: &tokenPort{caller: p.Caller, sel: sel}}, nil
}
