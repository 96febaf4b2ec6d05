package poolhook

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzPoolHook: whatever the body, the pool hook answers or refuses with ErrBadRequest; it
// never panics, and an answer lists each member once. Seeded with every pool fixture.
func FuzzPoolHook(f *testing.F) {
	reqs, _ := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "pools-*", "*", "request.json"))
	for _, r := range reqs {
		b, err := os.ReadFile(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	if len(reqs) == 0 {
		f.Fatal("no pool fixtures to seed from")
	}
	h := &Hooks{Now: func() time.Time { return now }, Load: fakeLoad{active: map[string]int{}, cooling: map[string]int{}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, hook := range []string{"sync", "finalize"} {
			resp, _, err := h.Handle(context.Background(), hook, body)
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("%s: error %v is not ErrBadRequest", hook, err)
				}
				continue
			}
			seen := map[string]bool{}
			for _, c := range resp.Children {
				var m struct {
					Metadata struct {
						Name string `json:"name"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(c, &m); err != nil || m.Metadata.Name == "" {
					t.Fatalf("%s: child %s: %v", hook, c, err)
				}
				if seen[m.Metadata.Name] {
					t.Fatalf("%s: member %s listed twice", hook, m.Metadata.Name)
				}
				seen[m.Metadata.Name] = true
			}
		}
	})
}
