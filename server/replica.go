package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// replica is what the discovery and gateway subcommands share: a Redis-backed lease store
// and fleet reader that an operator fills, and the servers in front of them, served until the
// context ends.
type replica struct {
	log     *slog.Logger
	grace   time.Duration
	backend *redisBackend
	servers []served
	// loops run beside the store's and the reader's (the console's traffic sampler).
	loops []func(context.Context) error
}

// served is one server of a replica on its bound listener; the first is the replica's own
// (its shutdown error is the one Run reports).
type served struct {
	name string
	srv  server
	ln   net.Listener
}

// server is what a replica serves on a listener: an *http.Server or the gateway's SOCKS5 server.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// replicaRegistry is a replica's own metrics registry (its requests, latencies, refusals,
// and the Go and process collectors).
func replicaRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// close releases the listeners and the backend of a replica that will not Run (or has run).
func (r *replica) close() {
	for _, s := range r.servers {
		_ = s.ln.Close()
	}
	if r.backend != nil {
		r.backend.close()
	}
}

// run serves every server until ctx ends or one fails, with the reader and the store's sweep
// running beside them, then shuts them down within grace.
func (r *replica) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer r.close()
	errc := make(chan error, len(r.servers)+2)
	for _, s := range r.servers {
		go func() { errc <- fmt.Errorf("%s server: %w", s.name, s.srv.Serve(s.ln)) }()
	}
	waitLoops := startLoops(ctx, errc, append([]func(context.Context) error{r.backend.reader.Run, r.backend.store.Run}, r.loops...))
	var runErr error
	select {
	case runErr = <-errc:
	case <-ctx.Done():
	}
	r.log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), r.grace)
	defer scancel()
	for i, s := range r.servers {
		if err := s.srv.Shutdown(sctx); err != nil && runErr == nil && i == 0 {
			runErr = fmt.Errorf("%s server shutdown: %w", s.name, err)
		}
	}
	cancel()
	waitLoops()
	if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}
	return runErr
}
