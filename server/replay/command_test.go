package replay_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/replay"
)

func TestReplayCommand(t *testing.T) {
	var out bytes.Buffer
	if err := replay.Command([]string{filepath.Join("..", "..", "testdata", "sync", "create-quota")}, &out); err != nil {
		t.Fatalf("replay of a committed fixture: %v\n%s", err, out.String())
	}
	for _, want := range []string{"HTTP 200", `"reason": "QuotaExceeded"`, "create proxy-30027a145f80-f6705e6c3e -> mock create: quota exceeded", "golden: match"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A fixture whose golden is wrong makes the command fail and print the diff.
	dir := t.TempDir()
	for _, f := range []string{replay.RequestFile, replay.StateFile, replay.CallsFile} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "sync", "create-quota", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, replay.ResponseFile), []byte(`{"code":200,"body":{"status":{"phase":"Ready"},"children":[]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	// The hook comes from the folder's parent name unless state.json says it.
	st := filepath.Join(dir, replay.StateFile)
	b, _ := os.ReadFile(st)
	if err := os.WriteFile(st, bytes.Replace(b, []byte(`{`), []byte(`{"hook":"sync",`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	err := replay.Command([]string{dir}, &out)
	if err == nil || !strings.Contains(out.String(), "golden: differs") || !strings.Contains(out.String(), `-`) {
		t.Errorf("wrong golden: err %v, output:\n%s", err, out.String())
	}

	if err := replay.Command(nil, io.Discard); err == nil {
		t.Error("replay without a directory: no error")
	}
}
