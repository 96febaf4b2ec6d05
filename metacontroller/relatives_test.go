package metacontroller

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRelativeObjectsDecode(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    RelativeObjects
		wantErr string
	}{
		{"absent", `{"parent":{}}`, nil, ""},
		{"null", `{"parent":{},"children":null}`, nil, ""},
		{"empty", `{"parent":{},"children":{}}`, RelativeObjects{}, ""},
		{"a null type", `{"parent":{},"children":{"Secret.v1":null}}`, RelativeObjects{}, ""},
		{"two types", `{"parent":{},"children":{"Secret.v1":{"ns/a":{"x":1}},"Proxy.crawl.example.com/v1alpha1":{"b":{},"c":[1]}}}`,
			RelativeObjects{"Secret.v1": {"ns/a": json.RawMessage(`{"x":1}`)}, "Proxy.crawl.example.com/v1alpha1": {"b": json.RawMessage(`{}`), "c": json.RawMessage(`[1]`)}}, ""},
		{"not an object", `{"parent":{},"children":[1]}`, nil, "cannot unmarshal"},
		{"a type not an object", `{"parent":{},"children":{"Secret.v1":[1]}}`, nil, "cannot unmarshal"},
		{"malformed", `{"parent":{},"children":{"Secret.v1":{"a":}}}`, nil, "invalid character"},
		{"at the limit", body(MaxRelativeObjects), nil, ""},
		{"over the limit", body(MaxRelativeObjects + 1), nil, "too many objects: more than 4096 objects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req SyncRequest
			err := json.Unmarshal([]byte(tt.body), &req)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Unmarshal: %v", err)
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Unmarshal = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if strings.HasPrefix(tt.name, "at the limit") {
				if got := len(req.Children["Proxy.v1"]) + len(req.Children["Secret.v1"]); got != MaxRelativeObjects {
					t.Errorf("decoded %d objects, want %d", got, MaxRelativeObjects)
				}
				return
			}
			if diff := cmp.Diff(tt.want, req.Children); diff != "" {
				t.Errorf("children (-want +got):\n%s", diff)
			}
		})
	}
	var req SyncRequest
	if err := json.Unmarshal([]byte(body(MaxRelativeObjects+1)), &req); !errors.Is(err, ErrTooManyObjects) {
		t.Errorf("err = %v, want ErrTooManyObjects", err)
	}
}

// body has n tiny children split over two types: the count is over the whole map.
func body(n int) string {
	var a, b []string
	for i := range n {
		if i%2 == 0 {
			a = append(a, fmt.Sprintf(`"p%d":{}`, i))
		} else {
			b = append(b, fmt.Sprintf(`"s%d":{}`, i))
		}
	}
	return `{"parent":{},"children":{"Proxy.v1":{` + strings.Join(a, ",") + `},"Secret.v1":{` + strings.Join(b, ",") + `}}}`
}
