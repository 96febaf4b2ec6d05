// Package kube owns how the operator reaches the Kubernetes API: which rest.Config it uses
// (in-cluster, a kubeconfig, or none at all), the client-side rate limit on it, and the
// clients built over it. It knows nothing of what the clients are used for.
package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// ErrNoCluster: neither an in-cluster service account nor a kubeconfig was found. The
// operator then runs without a Kubernetes client (the no-cluster quickstart).
var ErrNoCluster = errors.New("kube: no cluster configuration (not in a cluster, no -kubeconfig, no KUBECONFIG)")

// Defaults of the operator's own client budget. They are the operator's, not Metacontroller's:
// the operator lists Proxies for GC, patches one annotation per health transition and
// records events; 20/s with a burst of 40 carries a fleet-wide outage of 10,000 proxies in
// about 8 minutes of patches while costing the API server little.
const (
	DefaultQPS     = 20
	DefaultBurst   = 40
	DefaultTimeout = 30 * time.Second
	// UserAgent names the operator in API server audit logs.
	UserAgent = "proxy-operator"
)

// Options choose where the config comes from and the client budget.
type Options struct {
	// Kubeconfig is a kubeconfig path (the -kubeconfig flag); it wins over KUBECONFIG and the
	// in-cluster config.
	Kubeconfig string
	// QPS and Burst bound the client's request rate (0: DefaultQPS, DefaultBurst).
	QPS   float32
	Burst int
	// Timeout bounds every request (0: DefaultTimeout).
	Timeout time.Duration
	// Getenv reads the environment (nil: os.Getenv).
	Getenv func(string) string
}

// Source says where a config came from, for the start-up log.
type Source string

// Where a config can come from.
const (
	SourceFlag      Source = "kubeconfig flag"
	SourceEnv       Source = "KUBECONFIG"
	SourceInCluster Source = "in-cluster"
)

// Config returns the rest.Config to use: -kubeconfig, else KUBECONFIG, else the in-cluster
// service account; ErrNoCluster when none applies. A kubeconfig that is named but unusable,
// or a cluster whose service account files are unreadable, is an error, never a quiet
// fallback to running without a client.
func Config(o Options) (*rest.Config, Source, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var (
		cfg *rest.Config
		src Source
		err error
	)
	switch {
	case o.Kubeconfig != "":
		src = SourceFlag
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	case getenv("KUBECONFIG") != "":
		src = SourceEnv
		// Only the files KUBECONFIG names: ~/.kube/config is never read implicitly, so a
		// laptop run without either stays client-less rather than borrowing a default context.
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(getenv("KUBECONFIG"))}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	case getenv("KUBERNETES_SERVICE_HOST") != "" && getenv("KUBERNETES_SERVICE_PORT") != "":
		src = SourceInCluster
		cfg, err = rest.InClusterConfig()
	default:
		return nil, "", ErrNoCluster
	}
	if err != nil {
		return nil, src, fmt.Errorf("kube: %s config: %w", src, err)
	}
	cfg.QPS, cfg.Burst, cfg.Timeout = o.QPS, o.Burst, o.Timeout
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.UserAgent = UserAgent
	return cfg, src, nil
}

// ProxyResource is the Proxies' resource for the dynamic client.
var ProxyResource = schema.GroupVersionResource{Group: v1.Group, Version: v1.Version, Resource: v1.Resource}

// PoolResource is the ProxyPools' resource for the dynamic client.
var PoolResource = schema.GroupVersionResource{Group: v1.Group, Version: v1.Version, Resource: v1.PoolResource}

// Clients are the clients the operator uses: one dynamic client, for Proxies (their Go types
// carry no generated clientset) and for the few core objects it touches (Secrets, Events;
// core.go), so that the binary carries no typed clientset: client-go's clientset registers
// every API group of Kubernetes, which was a quarter of a cold build (decision 0284).
type Clients struct {
	Dynamic dynamic.Interface
}

// NewClients builds the client over cfg (with its own rate limiter).
func NewClients(cfg *rest.Config) (*Clients, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: dynamic client: %w", err)
	}
	return &Clients{Dynamic: dyn}, nil
}
