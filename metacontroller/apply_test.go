package metacontroller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

// TestKustomizationAppliesToAPIServer applies the rendered install to a real kube-apiserver, so
// the server's own validation (names, ports, selectors, RBAC, the CRDs) judges every object.
// The CompositeControllers are applied after Metacontroller's own CRD (a verbatim copy of
// v4.17.2's in testdata/), with kubectl's strict field validation: a misplaced field, such as
// a hook version inside webhook, is refused here as it would be in a cluster.
func TestKustomizationAppliesToAPIServer(t *testing.T) {
	bin := kubectl(t)
	s := apiservertest.Start(t)
	kubeconfig := s.Kubeconfig(t)

	ctx, cancel := context.WithTimeout(context.Background(), renderTimeout)
	defer cancel()
	crd, err := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", "testdata/compositecontrollers-crd-v4.17.2.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("applying Metacontroller's CRD: %v\n%s", err, crd)
	}
	if out, err := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/compositecontrollers.metacontroller.k8s.io").CombinedOutput(); err != nil {
		t.Fatalf("waiting for Metacontroller's CRD: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "kustomize", ".").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	var kept, controllers []string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "\nkind: CompositeController\n") || strings.HasPrefix(doc, "kind: CompositeController\n") {
			controllers = append(controllers, doc)
			continue
		}
		kept = append(kept, doc)
	}
	if len(controllers) != 2 {
		t.Fatalf("found %d CompositeControllers in the render, want 2 (proxies, proxypools)", len(controllers))
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(strings.Join(kept, "\n---\n"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Logf("kubectl apply:\n%s", stdout.String())
	if got := strings.Count(stdout.String(), " created"); got != len(kept) {
		t.Errorf("%d objects created, want %d", got, len(kept))
	}

	// The CompositeControllers, once the CRDs they name are there, strictly validated.
	stdout.Reset()
	stderr.Reset()
	cmd = exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "apply", "--validate=strict", "-f", "-")
	cmd.Stdin = strings.NewReader(strings.Join(controllers, "\n---\n"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl apply of the CompositeControllers: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if got := strings.Count(stdout.String(), " created"); got != len(controllers) {
		t.Errorf("%d CompositeControllers created, want %d:\n%s", got, len(controllers), stdout.String())
	}

	// The Deployment as stored: the server kept our hardening and the image.
	b := s.Must(t, http.StatusOK, http.MethodGet, "/apis/apps/v1/namespaces/"+namespace+"/deployments/"+deployment, nil, "")
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image           string `json:"image"`
						SecurityContext struct {
							ReadOnlyRootFilesystem bool `json:"readOnlyRootFilesystem"`
						} `json:"securityContext"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	if cs := dep.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Image != "proxy-operator:dev" || !cs[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("stored deployment containers = %+v", cs)
	}
}
