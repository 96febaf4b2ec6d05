package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// CommandUsage is the synopsis of the replay subcommand.
const CommandUsage = "proxy-operator replay <fixture-dir | capture-dir>"

// Command is the replay subcommand: it replays one fixture folder, or every fixture under a
// capture directory, and prints each answer and the provider calls it made. It fails when one
// differs from its golden.
func Command(args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: %s", CommandUsage)
	}
	var cases []Case
	if _, err := os.Stat(filepath.Join(args[0], RequestFile)); err == nil {
		c, err := Load(args[0])
		if err != nil {
			return err
		}
		cases = append(cases, c)
	} else {
		var err error
		if cases, err = LoadAll(args[0]); err != nil {
			return err
		}
		if len(cases) == 0 {
			return fmt.Errorf("replay: no fixture in %s (want %s, or <hook>/<case>/%s below it)", args[0], RequestFile, RequestFile)
		}
	}
	differ := 0
	for _, c := range cases {
		got, err := Run(c, nil)
		if err != nil {
			return err
		}
		var body bytes.Buffer
		if json.Indent(&body, got.Body, "", "  ") != nil {
			body.Write(got.Body)
		}
		fmt.Fprintf(out, "== %s (%s)\nHTTP %d\n%s\nprovider calls:\n", c.Dir, c.Hook, got.Code, body.String())
		if len(got.Calls) == 0 {
			fmt.Fprintln(out, "  (none)")
		}
		for _, call := range got.Calls {
			line := "  " + call.Op + " " + call.Arg
			if call.Err != "" {
				line += " -> " + call.Err
			}
			fmt.Fprintln(out, strings.TrimRight(line, " "))
		}
		switch d := Diff(c, got); {
		case c.Want == nil:
			fmt.Fprintln(out, "golden: none")
		case d == "":
			fmt.Fprintln(out, "golden: match")
		default:
			differ++
			fmt.Fprintf(out, "golden: differs\n%s", d)
		}
	}
	if differ > 0 {
		return fmt.Errorf("replay: %d of %d fixtures differ from their goldens", differ, len(cases))
	}
	return nil
}
