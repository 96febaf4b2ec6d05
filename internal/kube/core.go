package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SecretResource and EventResource are the core objects the operator reads and writes, through
// the dynamic client (Clients).
var (
	SecretResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	EventResource  = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// FromObject turns a typed core object (a *corev1.Secret, a *corev1.Event) into what the
// dynamic client sends, with its apiVersion and kind set.
func FromObject(obj any, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("kube: encoding a %s: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("v1")
	u.SetKind(kind)
	return u, nil
}

// ToObject decodes what the dynamic client returned into out, a pointer to a typed core
// object.
func ToObject(u *unstructured.Unstructured, out any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return fmt.Errorf("kube: decoding %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}
