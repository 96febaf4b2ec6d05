// Package browsertest starts Debian's headless Chromium for a test, driven with chromedp
// (decision 0291): a new empty profile, the quiet flags that keep Chromium's own calls off the
// network, the test's own flags, and a browser closed and waited for when the test ends.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proxy-operator/proxy-operator/internal/logtest"
)

// Path is where Debian's chromium package puts the browser.
const Path = "/usr/bin/chromium"

// Chromium is the browser's path. Without it the test skips, or fails when CI is set (.ci/run
// installs Debian's chromium).
func Chromium(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath(Path); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found and CI is set: .ci/run installs Debian's chromium", Path)
	}
	t.Skipf("%s not found: skipping this browser test (apt-get install chromium; CI makes this a failure)", Path)
	return ""
}

// Start starts a browser with flags added to the quiet defaults and returns its context (one
// tab) and the buffer Chromium's output goes to, for failure messages. The first action has
// run: the browser is up. The browser is closed, and waited for, when the test ends.
func Start(t testing.TB, flags ...chromedp.ExecAllocatorOption) (context.Context, *logtest.Buffer) {
	t.Helper()
	chromium := Chromium(t)
	out := &logtest.Buffer{} // Chromium writes it from the allocator's goroutines
	// Puppeteer's quiet defaults (chromedp's list: no extensions, default apps, translation,
	// phishing checks, crash reports), then what this machine needs.
	opts := slices.Concat(chromedp.DefaultExecAllocatorOptions[:], []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		// The network here is loopback only: nothing of Chromium's own may try to leave.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.CombinedOutput(out),
		// No UserDataDir: chromedp makes a new empty one and removes it when the browser is gone.
	}, flags)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Close the browser and wait for it to exit (bounded), then the allocator's cancel.
		cctx, ccancel := context.WithTimeout(bctx, 20*time.Second)
		defer ccancel()
		_ = chromedp.Cancel(cctx)
		bcancel()
	})
	// The first call starts the browser and must not carry a timeout (it would stop the
	// browser); Chromium's start is bounded by the allocator's own wait for its DevTools address.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v\nchromium's output:\n%s", err, out.String())
	}
	return bctx, out
}
