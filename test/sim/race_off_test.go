//go:build !race

package sim_test

// raceOn: see race_on_test.go.
const raceOn = false
