package lease

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// policyDefault names a default of Policy's fields.
var policyDefault = regexp.MustCompile(`\bDefault(RateLimitedCooldown|BannedCooldown|MaxCooldown|SessionIdle|MaxSessions|MaxCooldownsPerProxy|MaxCooldowns|MaxSessionsPerNamespace|MaxCooldownsPerNamespace|MaxLeasesPerHolder)\b`)

// TestPolicyDefaultsStatedOnce: the defaults of the lease policy are read in one place,
// DefaultPolicy, by every store and by the flags (issue 35: each cooldown default was stated in
// lease.Memory, in redisstore.New and in the server's flag defaults). Other code takes
// DefaultPolicy or WithDefaults; tests and the conformance suite may name the values.
func TestPolicyDefaultsStatedOnce(t *testing.T) {
	if !policyDefault.MatchString("DefaultMaxCooldowns") || policyDefault.MatchString("DefaultMaxCooldownsX") {
		t.Fatal("policyDefault misclassifies")
	}
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "leasetest") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			// Outside package lease the defaults are lease.DefaultX; another package's
			// DefaultMaxSessions (the console's) is its own.
			if m := policyDefault.FindStringIndex(code); m == nil || (filepath.Dir(filepath.ToSlash(path)) != "../lease" && !strings.HasSuffix(code[:m[0]], "lease.")) {
				continue
			}
			// The constants' own declarations, and DefaultPolicy.
			switch filepath.ToSlash(path) {
			case "../lease/policy.go":
				continue
			case "../lease/memory.go", "../lease/lease.go":
				if strings.Contains(code, " = ") {
					continue
				}
			}
			t.Errorf("%s:%d names a lease policy default: take lease.DefaultPolicy() or Policy.WithDefaults() instead\n\t%s", path, i+1, strings.TrimSpace(line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("read %d Go files, want the module's hundreds", checked)
	}
}

// TestPolicyWithDefaults: unset fields take the defaults, the per-namespace shares capped at the
// totals; set ones and MaxLeasesPerHolder 0 (no bound) stay.
func TestPolicyWithDefaults(t *testing.T) {
	got := Policy{RateLimitedCooldown: time.Minute, MaxSessions: 50, MaxCooldowns: -1}.WithDefaults()
	want := DefaultPolicy()
	want.RateLimitedCooldown, want.MaxSessions, want.MaxSessionsPerNamespace, want.MaxLeasesPerHolder = time.Minute, 50, 50, 0
	if got != want {
		t.Errorf("WithDefaults = %+v\nwant %+v", got, want)
	}
}

// TestPolicyValidate names the flag of the setting out of range.
func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Policy)
		want string
	}{
		{"no cooldown", func(p *Policy) { p.RateLimitedCooldown = 0 }, "-lease-cooldown"},
		{"cap under a cooldown", func(p *Policy) { p.MaxCooldown = time.Minute }, "-lease-max-cooldown"},
		{"negative share", func(p *Policy) { p.MaxLeasesPerHolder = -1 }, "-lease-max-per-token"},
		{"negative bound", func(p *Policy) { p.MaxSessions = -1 }, "bounds"},
	} {
		p := DefaultPolicy()
		tc.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
