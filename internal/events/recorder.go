package events

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	"github.com/proxy-operator/proxy-operator/internal/kube"

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

// NewRecorder starts a broadcaster writing to the API server through dyn.
func NewRecorder(dyn dynamic.Interface, log *slog.Logger) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(sink{dyn})
	if log != nil {
		b.StartEventWatcher(func(e *corev1.Event) {
			log.Debug("event recorded", "proxy", e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
		})
	}
	return &Recorder{b: b, rec: b.NewRecorder(coreScheme, corev1.EventSource{Component: Component})}
}

// coreScheme knows core/v1 alone: record needs a scheme only to name an involved object's
// kind, and the involved object is always a reference (Reference). client-go's own scheme
// registers every API group of Kubernetes, which the binary is better without (decision 0284).
var coreScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err) // registering the core types into an empty scheme cannot fail
	}
	return s
}()

// sink is record.EventSink over the dynamic client: what client-go's typed EventSinkImpl does.
type sink struct{ dyn dynamic.Interface }

func (s sink) events(e *corev1.Event) dynamic.ResourceInterface {
	return s.dyn.Resource(kube.EventResource).Namespace(e.Namespace)
}

// Create writes a new Event.
func (s sink) Create(e *corev1.Event) (*corev1.Event, error) {
	u, err := kube.FromObject(e, "Event")
	if err != nil {
		return nil, err
	}
	return decoded(s.events(e).Create(context.Background(), u, metav1.CreateOptions{}))
}

// Update replaces an Event (record updates a series' count this way).
func (s sink) Update(e *corev1.Event) (*corev1.Event, error) {
	u, err := kube.FromObject(e, "Event")
	if err != nil {
		return nil, err
	}
	return decoded(s.events(e).Update(context.Background(), u, metav1.UpdateOptions{}))
}

// Patch applies record's strategic merge patch of an aggregated Event.
func (s sink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return decoded(s.events(e).Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}))
}

func decoded(u *unstructured.Unstructured, err error) (*corev1.Event, error) {
	if err != nil {
		return nil, err
	}
	e := &corev1.Event{}
	return e, kube.ToObject(u, e)
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
