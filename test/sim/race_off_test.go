//go:build !race

package driver_test

// raceOn: see race_on_test.go.
const raceOn = false
