// Package sim holds the simulations of the whole operator under Metacontroller: the real hook
// server (server/hooks, the pool hooks, server.New) driven by metacontroller/driver on a virtual
// clock, with mock or stand-in clouds: crash and restart schedules, churn, fleet scale, pools,
// quality, steady state and TLS. They are slow (minutes under -race); the driver's own tests
// (metacontroller/driver) check the loop against a stub hook and take seconds.
package sim
