package hooks_test

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/replay"
)

var update = flag.Bool("update", false, "rewrite the golden response.json and calls.json of every fixture")

// TestGolden replays every fixture under testdata/<hook>/<case> through the real router.
func TestGolden(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	cases, err := replay.LoadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 15 {
		t.Fatalf("found %d fixtures under %s, want at least 15", len(cases), root)
	}
	for _, c := range cases {
		name := strings.TrimPrefix(filepath.ToSlash(c.Dir), filepath.ToSlash(root)+"/")
		t.Run(name, func(t *testing.T) {
			got, err := replay.Run(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := replay.WriteGolden(c.Dir, got); err != nil {
					t.Fatal(err)
				}
				return
			}
			if d := replay.Diff(c, got); d != "" {
				t.Errorf("%s: replay differs from the goldens:\n%s", c.Dir, d)
			}
		})
	}
}
