package driver

import (
	"slices"
	"time"
)

// Read-only views for simulations that run the loop step by step (crash and churn tests).

// NextDue is when the earliest queued sync is due; false when nothing is queued.
func (d *Driver) NextDue() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, due, ok := d.next()
	return due, ok
}

// Keys returns the key of every live parent (being deleted included), sorted.
func (d *Driver) Keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.objs))
	for k := range d.objs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ParentWrites is the number of status writes to one parent so far.
func (d *Driver) ParentWrites(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.objs[key]; ok {
		return o.writes
	}
	return 0
}
