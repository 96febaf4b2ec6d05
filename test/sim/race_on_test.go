//go:build race

package sim_test

// raceOn: the race detector slows the hook server about tenfold; the largest simulations run
// without it (make test-go runs them in a second, race-free pass).
const raceOn = true
