// Command proxy-operator is the Metacontroller webhook operator for HTTP egress proxies. This
// file only turns flags into a server.Config (the bindings live in server/flags.go),
// dispatches subcommands and stops on a signal; the wiring lives in package server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

// description is the one line -h starts with.
const description = "proxy-operator: the Metacontroller webhook operator for HTTP egress proxies: provisions them (mock, GCP VMs, Squid Pods), probes them through themselves, and leases healthy ones to crawlers."

// subcommand is one entry of the table below: the first argument selects it.
type subcommand struct {
	// usage is the synopsis, summary one line of what it does; ownHelp: it answers -h itself.
	usage, summary string
	ownHelp        bool
	run            func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// subcommands are every subcommand; with none named, the operator runs. Adding one is one
// entry here.
var subcommands = map[string]subcommand{
	"replay": {usage: replay.CommandUsage, summary: "replay captured or committed hook fixtures through the real router and compare with their goldens",
		run: func(_ context.Context, args []string, stdout, _ io.Writer) error { return replay.Command(args, stdout) }},
	"discovery": {usage: server.DiscoveryUsage, summary: server.DiscoverySummary, ownHelp: true, run: server.DiscoveryCommand},
	"gateway":   {usage: server.GatewayUsage, summary: server.GatewaySummary, ownHelp: true, run: server.GatewayCommand},
}

// usage writes -h's text: the description, the synopses, the environment and the flags.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  proxy-operator [flags]\n\trun the operator: Metacontroller hooks on -hook-addr, the crawlers' discovery API on -discovery-addr\n", description)
	for _, name := range slices.Sorted(maps.Keys(subcommands)) {
		sc := subcommands[name]
		fmt.Fprintf(w, "  %s\n\t%s\n", sc.usage, sc.summary)
	}
	fmt.Fprintf(w, "\nEnvironment:\n  DISCOVERY_TOKEN\n\tbearer token every discovery API request must carry (-discovery-token-file wins over it)\n\nFlags:\n")
	fs.PrintDefaults()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode is 0 for success and for -h, else 1 after printing err.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "proxy-operator:", err)
	return 1
}

// dispatch runs the subcommand named by args[0], else the operator with args as flags.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if sc, ok := subcommands[args[0]]; ok {
			if !sc.ownHelp && len(args) > 1 && server.IsHelp(args[1]) {
				_, err := fmt.Fprintf(stdout, "Usage: %s\n\t%s\n", sc.usage, sc.summary)
				return err
			}
			return sc.run(ctx, args[1:], stdout, stderr)
		}
		if args[0] != "help" {
			names := slices.Sorted(maps.Keys(subcommands))
			return fmt.Errorf("unknown subcommand %q%s (subcommands: %s; flags start with '-'; run 'proxy-operator -h' for help)", args[0], server.DidYouMean(args[0], names), strings.Join(names, ", "))
		}
		args = []string{"-h"}
	}
	c, err := server.OperatorFlags(args, usage, stdout, stderr)
	if err != nil {
		return err
	}
	return server.Run(ctx, c)
}
