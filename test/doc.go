// Package test holds the checks that span the repository: the layout of its folders and
// packages (layout_test.go) and the README quickstart run as a user would (quickstart_test.go).
// Its sub-packages are the suites that drive the whole built process: reliability (hostile
// inputs, load, restarts), sim (the operator under a simulated Metacontroller: crash, churn,
// scale, pools), crawl and crawlfarm (the crawl benchmark and its loopback sites).
package test
