package providers

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes Go duration strings ("5s", "30s") in the
// providers config, shared by every provider's config block.
type Duration time.Duration

// UnmarshalJSON accepts a non-negative Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: want a number with a unit, such as 300ms, 5s, 2m or 1h30m (%w)", s, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q must not be negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
