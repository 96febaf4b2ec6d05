package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"
)

// The subcommands that serve from the shared Redis store, beside the operator itself; main.go
// only dispatches to them.
const (
	DiscoveryUsage   = "proxy-operator discovery -lease-store redis://HOST:PORT [flags]"
	DiscoverySummary = "serve only the discovery API, from the Redis an operator fills (any number of replicas)"
	GatewayUsage     = "proxy-operator gateway -lease-store redis://HOST:PORT [flags]"
	GatewaySummary   = "serve only the crawlers' proxy gateway, leasing from the Redis an operator fills (any number of replicas)"
)

// DiscoveryCommand is the discovery subcommand: the discovery API alone, served from Redis.
func DiscoveryCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := DiscoveryDefaults()
	log, err := parseCommand("proxy-operator discovery", DiscoveryUsage, DiscoverySummary, args, stdout, stderr,
		c.BindFlags, func() error { return c.Validate() })
	if err != nil {
		return err
	}
	c.Discovery.Token, c.Log = os.Getenv("DISCOVERY_TOKEN"), log
	return RunDiscovery(ctx, c)
}

// GatewayCommand is the gateway subcommand: the proxy gateway alone, leasing from Redis.
func GatewayCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := GatewayDefaults()
	log, err := parseCommand("proxy-operator gateway", GatewayUsage, GatewaySummary, args, stdout, stderr,
		c.BindFlags, func() error { return c.Validate() })
	if err != nil {
		return err
	}
	c.Token, c.Log = os.Getenv("DISCOVERY_TOKEN"), log
	return RunGateway(ctx, c)
}

// parseCommand parses a subcommand's args into the flags bind sets and the log flags, checks
// them with validate, and returns the logger they ask for.
func parseCommand(name, usage, summary string, args []string, stdout, stderr io.Writer,
	bind func(*flag.FlagSet), validate func() error) (*slog.Logger, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\t%s\n\nFlags:\n", usage, summary)
		fs.PrintDefaults()
	}
	logc := LogConfig{}
	bind(fs)
	logc.BindFlags(fs)
	if err := ParseFlags(fs, args, stdout, stderr); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		return nil, err
	}
	return logc.Logger(stderr), nil
}

// ParseFlags parses args into the flags bound to fs and checks that nothing follows them. Asked
// for, help is the answer and goes to stdout; otherwise usage goes with the error to stderr.
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(stderr)
	help := slices.ContainsFunc(args, IsHelp)
	if help {
		fs.SetOutput(stdout)
	} else {
		// A mistake gets one line saying what is wrong (explainFlagError, printed by main),
		// not the flag package's own line and every flag's help.
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if help {
			return err
		}
		return explainFlagError(fs, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q after the flags: a subcommand comes first; run 'proxy-operator -h' for help", fs.Args())
	}
	return nil
}

// explainFlagError turns the flag package's terse errors into ones that say what was meant:
// the nearest flag for an unknown one, what a duration looks like for a bad one.
func explainFlagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		hint := strings.Replace(DidYouMean(strings.TrimPrefix(name, "-"), names), `"`, "-", 1)
		hint = strings.Replace(hint, `"?`, "?", 1)
		return fmt.Errorf("unknown flag -%s%s (run '%s -h' for every flag)", name, hint, fs.Name())
	}
	var value, name string
	if _, scanErr := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &name); scanErr == nil {
		name = strings.TrimSuffix(name, ":")
		if f := fs.Lookup(name); f != nil {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isDuration := g.Get().(time.Duration); isDuration {
					return fmt.Errorf("-%s %q: not a duration: want a number with a unit, such as 300ms, 5s, 2m or 1h30m (0 needs none)", name, value)
				}
			}
		}
	}
	return fmt.Errorf("%w (run '%s -h' for every flag)", err, fs.Name())
}

// IsHelp reports whether arg asks for help (-h, -help, --help): the one spelling main.go and
// the subcommands share.
func IsHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// OperatorFlags turns the operator's command line into its Config, logging to stderr; usage,
// when set, writes what -h prints. main.go and the tests that boot the operator as the command
// line does share it.
func OperatorFlags(args []string, usage func(io.Writer, *flag.FlagSet), stdout, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("proxy-operator", flag.ContinueOnError)
	if usage != nil {
		fs.Usage = func() { usage(fs.Output(), fs) }
	}
	c, logc := Defaults(), LogConfig{}
	c.BindFlags(fs)
	logc.BindFlags(fs)
	if err := ParseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	c.Discovery.Token, c.Log = os.Getenv("DISCOVERY_TOKEN"), logc.Logger(stderr)
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, c.Hooks.RequireCredentials()
}
