//go:build race

package gateway_test

// raceEnabled: the race detector multiplies memory, so memory bounds are not measured under it.
const raceEnabled = true
