package membudget

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
)

func TestRead(t *testing.T) {
	tests := []struct {
		name     string
		size     int64
		factor   int
		body     string
		declared int64
		limit    int64
		wantErr  error
	}{
		{"fits", 1 << 20, 4, strings.Repeat("x", 100_000), 100_000, 200_000, nil},
		{"fits undeclared", 1 << 20, 4, strings.Repeat("x", 100_000), -1, 200_000, nil},
		{"empty", 1 << 20, 4, "", 0, 10, nil},
		{"declared too large", 1 << 20, 4, "x", 11, 10, ErrTooLarge},
		{"read too large", 1 << 20, 4, strings.Repeat("x", 11), -1, 10, ErrTooLarge},
		{"lying Content-Length", 1 << 20, 4, strings.Repeat("x", 11), 5, 10, ErrTooLarge},
		{"over budget", 100_000, 4, strings.Repeat("x", 30_000), -1, 1 << 20, ErrOverBudget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.size, tc.factor)
			got, res, err := b.Read(strings.NewReader(tc.body), tc.declared, tc.limit)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Read: %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil || string(got) != tc.body {
					t.Fatalf("Read: %d bytes, %v; want the body", len(got), err)
				}
				if res.Held() < int64(len(tc.body))*int64(tc.factor) {
					t.Errorf("holds %d for %d bytes at factor %d", res.Held(), len(tc.body), tc.factor)
				}
				res.Release()
				res.Release()
			}
			if b.InUse() != 0 || !b.sem.TryAcquire(tc.size) {
				t.Errorf("%d still in use after the read ended", b.InUse())
			}
		})
	}
}

// trickle yields one byte per Read until it has given n, then blocks until released.
type trickle struct {
	n    int
	gave int
	wait chan struct{}
	sent chan struct{}
}

func (r *trickle) Read(p []byte) (int, error) {
	if r.gave == r.n {
		close(r.sent)
		<-r.wait
		return 0, io.ErrUnexpectedEOF
	}
	p[0] = 'x'
	r.gave++
	return 1, nil
}

// TestTrickleHoldsOnlyWhatItSent: a body declared at 4 MiB that trickles holds the budget for
// what it sent (one chunk), so trickling clients cannot starve real ones (issue 10, item 3).
func TestTrickleHoldsOnlyWhatItSent(t *testing.T) {
	const limit = 4 << 20
	b := New(64<<20, 12)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		tr := &trickle{n: 10, wait: release, sent: make(chan struct{})}
		wg.Add(1)
		failed := make(chan error, 1)
		go func() {
			defer wg.Done()
			_, _, err := b.Read(tr, limit, limit) // declares the whole 4 MiB, sends 10 bytes
			failed <- err
		}()
		select {
		case <-tr.sent:
		case err := <-failed:
			t.Fatalf("a trickling body was refused before it sent anything: %v", err)
		}
	}
	if got, max := b.InUse(), int64(8*chunk*12); got > max {
		t.Errorf("8 trickling bodies hold %d, want at most %d", got, max)
	}
	real := bytes.Repeat([]byte("y"), limit)
	got, res, err := b.Read(bytes.NewReader(real), -1, limit)
	if err != nil || len(got) != limit {
		t.Fatalf("a real 4 MiB body beside the trickles: %d bytes, %v", len(got), err)
	}
	res.Release()
	close(release)
	wg.Wait()
	if b.InUse() != 0 {
		t.Errorf("%d in use after every read ended", b.InUse())
	}
}

func TestLimitAndSizing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"max\n", 0, false}, {"268435456\n", 268435456, true}, {"9223372036854771712", 0, false}, {"", 0, false}, {"x", 0, false}} {
		if got, ok := parseCgroupLimit(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("parseCgroupLimit(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if l, src := Limit(123); l != 123 || src != "flag" {
		t.Errorf("Limit(123) = %d, %s", l, src)
	}
	if l, _ := Limit(0); l <= 0 {
		t.Errorf("Limit(0) = %d", l)
	}
	b := ForLimit(256<<20, 0, 0, 4<<20)
	if b.Size() != 64<<20 {
		t.Errorf("budget for 256 MiB: %d, want 64 MiB", b.Size())
	}
	if small := ForLimit(8<<20, 0.25, 12, 4<<20); small.MaxBody() < 4<<20 {
		t.Errorf("a small limit leaves room for a %d-byte body, want at least 4 MiB", small.MaxBody())
	}
}

func TestShapeWeight(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"empty", ``, 0},
		{"a string of braces is not weighed", `"{{{:::}}}"`, 0},
		{"an escaped quote stays in the string", `"\"{:"`, 0},
		{"root and one key", `{"a":1}`, ObjectCost + EntryCost},
		{"a child at depth 4", `{"children":{"T":{"k":{"x":1}}}}`, 3*ObjectCost + ChildCost + 4*EntryCost},
		{"arrays nest but cost nothing themselves", `[[[{}]]]`, ChildCost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShapeWeight([]byte(tt.body)); got != tt.want {
				t.Errorf("ShapeWeight(%s) = %d, want %d", tt.body, got, tt.want)
			}
		})
	}
}

func TestGrow(t *testing.T) {
	b := New(100, 1)
	_, res, err := b.Read(strings.NewReader("0123456789"), 10, 50)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Grow(200); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Grow past the whole budget = %v, want ErrTooLarge", err)
	}
	_, other, err := b.Read(strings.NewReader("0123456789"), 10, 50)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Grow(100 - res.Held() - other.Held() + 1); !errors.Is(err, ErrOverBudget) {
		t.Errorf("Grow past what is left = %v, want ErrOverBudget", err)
	}
	other.Release()
	if err := res.Grow(50); err != nil {
		t.Errorf("Grow within the budget: %v", err)
	}
	res.Release()
	if b.InUse() != 0 {
		t.Errorf("in use after release: %d", b.InUse())
	}
}
