package gateway

import "time"

// ConnCapFor is connCapFor, for tests of package gateway_test that size a flood under the cap.
var ConnCapFor = connCapFor

// SetNewConnGrace sets how long a new connection is evicted only after idle ones (newGrace),
// so a test of the order does not depend on how fast the machine is.
func (g *Gateway) SetNewConnGrace(d time.Duration) {
	g.once.Do(g.init)
	g.conns.mu.Lock()
	defer g.conns.mu.Unlock()
	g.conns.grace = d
}

// IdleConns is the number of connections idle between requests (after authenticating).
func (g *Gateway) IdleConns() int {
	g.conns.mu.Lock()
	defer g.conns.mu.Unlock()
	return g.conns.classes[classIdle].Len()
}
