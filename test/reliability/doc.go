// Package reliability holds the cross-surface survival tests: the bad-input table that drives
// the real hook and discovery routers and the providers config parser, the fuzz target of the
// providers config, and the load test of the whole process wiring over loopback HTTP. It has
// no code of its own; it knows the operator only through the packages main.go wires.
package reliability
