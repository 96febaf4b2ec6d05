// Package apiservertest starts a throwaway Kubernetes control plane for a test: etcd and
// kube-apiserver from $KUBEBUILDER_ASSETS, run by controller-runtime's envtest, the harness every
// kubebuilder project uses. It only adds this project's defaults to envtest (a skip with a reason
// when the assets are missing, start timeouts for a busy 2-core machine, never a real cluster)
// and knows nothing of this project's objects.
package apiservertest

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// startTimeout bounds the start of etcd and of kube-apiserver each. envtest's own default (20 s)
// is too short for a 2-core machine shared with other builds; a hang must still end.
const startTimeout = 2 * time.Minute

// requestTimeout bounds every request a test makes with the returned config.
const requestTimeout = 30 * time.Second

var quietLogs sync.Once

// Start starts etcd and kube-apiserver from $KUBEBUILDER_ASSETS with envtest, installs the CRDs
// found in crdDirs (envtest waits until each is served) and stops both when the test ends. It
// returns an admin (system:masters) client config. It skips when KUBEBUILDER_ASSETS is unset.
func Start(t *testing.T, crdDirs ...string) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is unset: set it to a folder holding kube-apiserver and etcd (setup-envtest use -p path, or .ci/run's build) to run this test against a real API server")
	}
	// envtest logs through controller-runtime's global logger, which otherwise complains with a
	// stack trace that it was never set.
	quietLogs.Do(func() { ctrllog.SetLogger(logr.Discard()) })

	never := false
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		UseExistingCluster:       &never, // USE_EXISTING_CLUSTER in the environment must not aim a test at a real cluster
		CRDDirectoryPaths:        crdDirs,
		ErrorIfCRDPathMissing:    len(crdDirs) > 0,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  time.Minute,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		// Start can fail half-way with processes running: stop whatever did start.
		_ = env.Stop()
		t.Fatalf("envtest: start the control plane from KUBEBUILDER_ASSETS=%s: %v", assets, err)
	}
	cfg.Timeout = requestTimeout
	t.Logf("etcd and kube-apiserver ready after %s", time.Since(start).Round(10*time.Millisecond))
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest: stop the control plane: %v", err)
		}
	})
	return cfg
}
