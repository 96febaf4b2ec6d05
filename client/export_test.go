package client

import (
	"context"
	"time"
)

// SetSleep replaces c's wait between retries, so the external tests (package client_test,
// which imports the real discovery server) move a clock instead of sleeping.
func SetSleep(c *Client, sleep func(ctx context.Context, d time.Duration) error) { c.sleep = sleep }

// SetNow replaces c's clock, which measures the lease wait, with the test's.
func SetNow(c *Client, now func() time.Time) { c.now = now }
