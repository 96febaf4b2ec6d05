package driver

import (
	"fmt"
	"maps"
)

// PatchAnnotations merges annotations into a live parent as a JSON merge patch from another
// client would (an empty value removes the key). A change is an update event, so the parent
// is enqueued at once, as Metacontroller's updateParentObject does for any update
// (metacontroller/metacontroller@v4.17.2:pkg/controller/composite/controller.go); a patch
// that changes nothing is no update and enqueues nothing. The call is not charged to
// Metacontroller's client budget (it is the patching client's), only to the API server's
// (Budget.ServerRate), once it is served the parent is enqueued.
func (d *Driver) PatchAnnotations(key string, annotations map[string]string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[key]
	if !ok {
		return fmt.Errorf("driver: patch %s: %w", key, ErrNotFound)
	}
	next := maps.Clone(o.parent.Annotations)
	if next == nil {
		next = map[string]string{}
	}
	for k, v := range annotations {
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	if maps.Equal(next, o.parent.Annotations) || (len(next) == 0 && len(o.parent.Annotations) == 0) {
		return nil
	}
	at := d.chargeOther(CallPatch)
	o.parent.Annotations = next
	o.bump()
	d.metaWrites++
	d.enqueue(o, at)
	return nil
}

// ErrNotFound: no live parent has that key.
var ErrNotFound = fmt.Errorf("not found")

// MetadataWrites is the number of metadata patches that changed a parent.
func (d *Driver) MetadataWrites() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metaWrites
}
