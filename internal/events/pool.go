package events

import (
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// Event records one event on a ProxyPool (the pool hooks' scale and rotation decisions); it
// makes Recorder a poolhook.EventRecorder.
func (r *Recorder) Event(p *v1.ProxyPool, eventType, reason, message string) {
	r.rec.Event(&corev1.ObjectReference{
		APIVersion: v1.APIVersion, Kind: v1.PoolKind,
		Namespace: p.Namespace, Name: p.Name, UID: p.UID,
	}, eventType, reason, message)
}
