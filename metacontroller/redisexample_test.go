package metacontroller_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const redisName = "proxy-operator-redis"

// TestRedisExampleDemandsAPasswordAndAdmitsOnlyOurPods (issue 30): the example Redis, created
// strictly on a real kube-apiserver, reads requirepass from the Secret the operator, discovery
// and gateway pods read with -lease-store-password-file (no literal password anywhere in the
// render), and the NetworkPolicy the API server stores admits to its port only those three
// kinds of pod of its namespace: not a Squid proxy Pod, not an unlabelled pod, not another
// namespace. The container's own command is then run with the real redis-server: it refuses a
// client without the password, answers one with it, its readiness probe fails on NOAUTH, and
// an empty password stops it rather than starting an open Redis.
func TestRedisExampleDemandsAPasswordAndAdmitsOnlyOurPods(t *testing.T) {
	docs := renderDocsIn(t, "ha/redis-example")
	ex := renderDir(t, "ha/redis-example")
	ha := renderDir(t, "ha")
	for key := range ex {
		if strings.HasPrefix(key, "Secret/") || strings.HasPrefix(key, "ConfigMap/") {
			t.Errorf("the example renders %s: the password must come from a Secret the user creates", key)
		}
	}

	var sts appsv1.StatefulSet
	ex.get(t, "StatefulSet/"+namespace+"/"+redisName, &sts)
	c := sts.Spec.Template.Spec.Containers[0]
	var ref *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == "REDISCLI_AUTH" && e.ValueFrom != nil {
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil || ref.Optional != nil && *ref.Optional {
		t.Fatalf("env %+v: want REDISCLI_AUTH from a required Secret key", c.Env)
	}
	// The Secret and key the store's clients read.
	for _, name := range []string{deployment, discDeployment, gwName} {
		var dep appsv1.Deployment
		ha.get(t, "Deployment/"+namespace+"/"+name, &dep)
		pc := dep.Spec.Template.Spec.Containers[0]
		file, ok := argValue(pc.Args, "-lease-store-password-file")
		if !ok {
			t.Errorf("%s: no -lease-store-password-file", name)
			continue
		}
		var found bool
		for _, m := range pc.VolumeMounts {
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == ref.Name && filepath.Join(m.MountPath, ref.Key) == file {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s reads the password from %s, not from Secret %s key %s", name, file, ref.Name, ref.Key)
		}
	}

	cl := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if _, err := cl.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		obj := decodeDoc(t, doc)
		res, err := cl.resource(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatalf("create %s: %v", objKey(obj), err)
		}
	}
	np, err := cl.kube.NetworkingV1().NetworkPolicies(namespace).Get(ctx, redisName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the example's NetworkPolicy: %v", err)
	}
	checkRedisPolicy(t, np, sts, ha)

	runExampleRedis(t, c)
}

func checkRedisPolicy(t *testing.T, np *networkingv1.NetworkPolicy, sts appsv1.StatefulSet, ha rendered) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Fatalf("NetworkPolicy podSelector %v (%v) does not select the Redis pods %v", np.Spec.PodSelector, err, sts.Spec.Template.Labels)
	}
	ingress := false
	for _, pt := range np.Spec.PolicyTypes {
		ingress = ingress || pt == networkingv1.PolicyTypeIngress
	}
	if !ingress || len(np.Spec.Ingress) != 1 {
		t.Fatalf("NetworkPolicy types %v, %d ingress rules: want Ingress with one rule", np.Spec.PolicyTypes, len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || containerPort(t, sts.Spec.Template.Spec.Containers[0], *rule.Ports[0].Port) != 6379 {
		t.Errorf("NetworkPolicy ports %+v, want Redis's 6379 only", rule.Ports)
	}
	if len(rule.From) == 0 {
		t.Fatal("NetworkPolicy admits every source: want our pods only")
	}
	admits := func(l map[string]string) bool {
		for _, peer := range rule.From {
			if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil {
				t.Errorf("NetworkPolicy peer %+v: want a pod selector of this namespace only", peer)
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Empty() && s.Matches(labels.Set(l)) {
				return true
			}
		}
		return false
	}
	for _, name := range []string{deployment, discDeployment, gwName} {
		var dep appsv1.Deployment
		ha.get(t, "Deployment/"+namespace+"/"+name, &dep)
		if !admits(dep.Spec.Template.Labels) {
			t.Errorf("NetworkPolicy does not admit %s's pods %v", name, dep.Spec.Template.Labels)
		}
	}
	for _, l := range []map[string]string{
		{},
		{"app.kubernetes.io/name": "squid", "app.kubernetes.io/managed-by": "proxy-operator"}, // a kubernetes-provider proxy Pod
		{"app.kubernetes.io/name": "proxy-operator"},
		sts.Spec.Template.Labels,
	} {
		if admits(l) {
			t.Errorf("NetworkPolicy admits a pod labelled %v", l)
		}
	}
}

// runExampleRedis runs the container's command and args with the local redis-server, its data
// directory moved to a temporary one and its listener onto a Unix socket there (no port).
func runExampleRedis(t *testing.T, c corev1.Container) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found and CI is set")
		}
		t.Skip("redis-server not found")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not found")
	}
	if len(c.Command) < 3 || c.Command[0] != "/bin/sh" || !strings.Contains(c.Command[2], "exec redis-server - ") {
		t.Fatalf("command %q: want sh -c starting redis-server with its config on stdin", c.Command)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	args := append(append([]string{}, c.Command[1:]...), c.Args...)
	args[1] = strings.Replace(args[1], "exec redis-server ", "exec "+bin+" ", 1)
	for i := range args {
		if i > 0 && args[i-1] == "--dir" {
			args[i] = dir
		}
	}
	args = append(args, "--port", "0", "--unixsocket", sock)
	const password = "5f0c2b9e8d7a61433e21c0ffee9a7b6d"
	start := func(pw string) (*exec.Cmd, *bytes.Buffer, chan error) {
		cmd := exec.Command(c.Command[0], args...)
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+pw)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, &out, done
	}

	// An empty password: the shell stops before redis-server starts.
	_, out, done := start("")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "empty password") {
			t.Errorf("with an empty password: exit %v, output %q: want a refusal to start", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("with an empty password the command is still running")
	}

	cmd, out, done := start(password)
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	authed := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Password: password, MaxRetries: -1})
	defer authed.Close()
	// Wait until it answers, bounded so a broken command fails.
	deadline := time.Now().Add(30 * time.Second)
	for {
		pong, err := authed.Ping(context.Background()).Result()
		if err == nil && pong == "PONG" {
			break
		}
		select {
		case werr := <-done:
			t.Fatalf("redis exited: %v\n%s", werr, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis with the password never answered: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	anon := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer anon.Close()
	if err := anon.HGetAll(context.Background(), "anything").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without the password: %v, want NOAUTH", err)
	}

	probe := c.ReadinessProbe
	if probe == nil || probe.Exec == nil || len(probe.Exec.Command) != 3 {
		t.Fatalf("readiness probe %+v: want sh -c redis-cli ...", probe)
	}
	script := strings.Replace(probe.Exec.Command[2], "redis-cli ", cli+" -s "+sock+" ", 1)
	for _, tc := range []struct {
		env   string
		ready bool
	}{{"REDISCLI_AUTH=" + password, true}, {"REDISCLI_AUTH=", false}, {"REDISCLI_AUTH=wrong", false}} {
		p := exec.Command(probe.Exec.Command[0], probe.Exec.Command[1], script)
		p.Env = append(os.Environ(), tc.env)
		err := p.Run()
		var exit *exec.ExitError
		if tc.ready && err != nil || !tc.ready && !errors.As(err, &exit) {
			t.Errorf("readiness probe with %s: %v, want ready=%v", tc.env, err, tc.ready)
		}
	}
}
