package events

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// Component is the event source shown by `kubectl describe` ("From").
const Component = "proxy-operator"

// Recorder sends events through client-go's record package: a broadcaster whose correlator
// aggregates similar events (more than 10 alike within 10 minutes become one, with a count)
// and rate-limits each object (a burst of 25, then one per 5 minutes), and whose sink writes
// core/v1 Events asynchronously, so a slow API server never holds up a hook.
type Recorder struct {
	b   record.EventBroadcaster
	rec record.EventRecorder
}

// NewRecorder starts a broadcaster writing to the API server through core.
func NewRecorder(core kubernetes.Interface, log *slog.Logger) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.CoreV1().Events("")})
	if log != nil {
		b.StartEventWatcher(func(e *corev1.Event) {
			log.Debug("event recorded", "proxy", e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
		})
	}
	return &Recorder{b: b, rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component})}
}

// Record records evs on p. It never blocks on the API server.
func (r *Recorder) Record(p *v1.Proxy, evs []Event) {
	ref := Reference(p)
	for _, e := range evs {
		r.rec.Event(ref, e.Type, e.Reason, e.Message)
	}
}

// Shutdown stops the broadcaster; events not yet sent are dropped.
func (r *Recorder) Shutdown() { r.b.Shutdown() }

// Reference is the involvedObject of p's events. The Proxy's Go type is not registered in a
// scheme (it has no generated DeepCopy), and record takes a reference as the object itself.
func Reference(p *v1.Proxy) runtime.Object {
	return &corev1.ObjectReference{
		APIVersion: v1.APIVersion, Kind: v1.Kind,
		Namespace: p.Namespace, Name: p.Name, UID: p.UID,
	}
}
