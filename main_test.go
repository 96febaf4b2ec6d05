package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplaySubcommand: "replay" dispatches to the replay command, whatever flags follow.
func TestReplaySubcommand(t *testing.T) {
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"replay", filepath.Join("testdata", "sync", "create-quota")}, &out, io.Discard); err != nil {
		t.Fatalf("replay of a committed fixture: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "golden: match") {
		t.Errorf("output lacks the golden verdict:\n%s", out.String())
	}
	if err := dispatch(context.Background(), []string{"replay"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "usage:") {
		t.Errorf("replay without a directory: %v, want the usage", err)
	}
}

// TestHelpAndMistypes: -h (and "help") prints the one-line description, the subcommands and the
// environment to stdout and exits 0; a mistyped subcommand names the one meant.
func TestHelpAndMistypes(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"-hook-addr", ":0", "-h"}} {
		var out, errOut bytes.Buffer
		err := dispatch(context.Background(), args, &out, &errOut)
		if code := exitCode(err, &errOut); code != 0 {
			t.Errorf("%v: exit %d (%v), want 0", args, code, err)
		}
		for _, want := range []string{description, "proxy-operator replay <fixture-dir | capture-dir>", "DISCOVERY_TOKEN", "-hook-addr"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	err := dispatch(context.Background(), []string{"repaly", "testdata/sync"}, &out, &errOut)
	if code := exitCode(err, &errOut); code != 1 || !strings.Contains(errOut.String(), `unknown subcommand "repaly"; did you mean "replay"?`) {
		t.Errorf("mistyped subcommand: exit %d, %q", code, errOut.String())
	}
	err = dispatch(context.Background(), []string{"-log-level", "info", "replay"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "a subcommand comes first") {
		t.Errorf("subcommand after flags: %v, want a hint that subcommands come first", err)
	}
	err = dispatch(context.Background(), []string{"frobnicate"}, io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "subcommands: discovery, gateway, replay") {
		t.Errorf("unrelated word: %v, want the list without a guess", err)
	}
}

// TestFlagMistakes: a mistyped flag names the nearest one, a bad duration says what a
// duration looks like, in one line each (not the whole help), for the operator and the
// discovery subcommand alike.
func TestFlagMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-hok-addr", "x"}, "unknown flag -hok-addr; did you mean -hook-addr? (run 'proxy-operator -h' for every flag)"},
		{[]string{"-fleet-warmup", "5"}, `-fleet-warmup "5": not a duration: want a number with a unit, such as 300ms, 5s, 2m or 1h30m`},
		{[]string{"discovery", "-lease-stor", "redis://x"}, "unknown flag -lease-stor; did you mean -lease-store? (run 'proxy-operator discovery -h' for every flag)"},
		{[]string{"discovery", "-lease-cooldown", "15"}, `-lease-cooldown "15": not a duration`},
	} {
		var out, errOut bytes.Buffer
		err := dispatch(context.Background(), tc.args, &out, &errOut)
		if code := exitCode(err, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
		if n := strings.Count(errOut.String(), "\n"); n != 1 {
			t.Errorf("%v: %d lines on stderr, want one:\n%s", tc.args, n, errOut.String())
		}
	}
}
