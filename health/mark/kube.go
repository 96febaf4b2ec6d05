package mark

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// KubePatcher patches the annotation with a JSON merge patch through client-go's dynamic
// client: one write, no read, and no conflict with Metacontroller's status writes (the
// patch touches metadata only, and carries no resourceVersion).
type KubePatcher struct {
	Client   dynamic.Interface
	Resource schema.GroupVersionResource
}

// Patch implements Patcher.
func (k KubePatcher) Patch(ctx context.Context, key, value string) error {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("healthmark: key %q is not namespace/name", key)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{Annotation: value}}})
	if err != nil {
		return err
	}
	_, err = k.Client.Resource(k.Resource).Namespace(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "proxy-operator"})
	if err != nil {
		return fmt.Errorf("healthmark: patch %s: %w", key, err)
	}
	return nil
}

// Gone implements Patcher: a Proxy that no longer exists needs no sync.
func (KubePatcher) Gone(err error) bool { return apierrors.IsNotFound(err) }
