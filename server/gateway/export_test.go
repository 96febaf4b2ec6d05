package gateway

// ConnCapFor is connCapFor, for tests of package gateway_test that size a flood under the cap.
var ConnCapFor = connCapFor
