package replay_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

// TestCaptureIsPrivateBoundedAndRedacted is issue 10, item 9: capture files were 0644 in 0755
// folders, grew without bound and held Secret data.
func TestCaptureIsPrivateBoundedAndRedacted(t *testing.T) {
	src, err := replay.Load(filepath.Join("..", "..", "testdata", "sync", "cloudinit-secret-create"))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("I2Nsb3VkLWNvbmZpZwpwYWNrYWdlczogW3NxdWlkXQo=")
	if !bytes.Contains(src.Request, secret) {
		t.Fatal("fixture no longer carries the Secret data this test looks for")
	}
	ex := hooks.Exchange{Hook: "sync", Now: src.State.Now, Request: src.Request, Code: src.Want.Code, Response: src.Want.Body,
		ProviderType: "mock",
		Input:        lifecycle.Input{Proxy: &v1.Proxy{Spec: v1.ProxySpec{Provider: "mock"}}, ProviderKnown: true}}

	t.Run("private and redacted", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "capture")
		rec, err := replay.NewRecorder(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec.Record(ex)
		var files int
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			want := fs.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			} else {
				files++
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if bytes.Contains(b, secret) {
					t.Errorf("%s holds the Secret's data", path)
				}
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s mode %o, want %o", path, got, want)
			}
			return nil
		})
		if err != nil || files != 3 {
			t.Fatalf("walk: %v, %d files; want 3", err, files)
		}
	})

	t.Run("secrets kept on request", func(t *testing.T) {
		root := t.TempDir()
		rec, err := replay.NewRecorder(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec.KeepSecrets = true
		rec.Record(ex)
		cases, err := replay.LoadAll(root)
		if err != nil || len(cases) != 1 {
			t.Fatalf("%d cases, %v", len(cases), err)
		}
		if !bytes.Contains(cases[0].Request, secret) {
			t.Error("KeepSecrets capture lacks the Secret data")
		}
		got, err := replay.Run(cases[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := replay.Diff(cases[0], got); d != "" {
			t.Errorf("replay differs:\n%s", d)
		}
	})

	t.Run("size cap", func(t *testing.T) {
		root := t.TempDir()
		rec, err := replay.NewRecorder(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec.MaxBytes = 3 * int64(len(src.Request)) // room for a few calls, not fifty
		for range 50 {
			rec.Record(ex)
		}
		cases, err := replay.LoadAll(root)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(cases); n == 0 || n >= 10 {
			t.Errorf("%d of 50 calls captured, want a few under the cap", n)
		}
		var total int64
		_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, _ error) error {
			if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
				total += fi.Size()
			}
			return nil
		})
		if total > rec.MaxBytes {
			t.Errorf("capture holds %d bytes, over the %d cap", total, rec.MaxBytes)
		}
		// A new recorder on the same directory counts what is already there.
		again, err := replay.NewRecorder(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		again.MaxBytes = rec.MaxBytes
		again.Record(ex)
		if after, _ := replay.LoadAll(root); len(after) != len(cases) {
			t.Errorf("a restarted recorder captured past the cap: %d cases, want %d", len(after), len(cases))
		}
	})
}

// TestExistingCaptureDirIsTightened: a capture directory that already exists with a loose mode
// (a hostPath, an earlier run under another umask) is made 0700 before anything is written.
func TestExistingCaptureDirIsTightened(t *testing.T) {
	root := filepath.Join(t.TempDir(), "capture")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := replay.NewRecorder(root, nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("capture dir mode %o, want 700", got)
	}
}
