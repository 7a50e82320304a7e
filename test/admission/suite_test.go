// Package admission_test checks the admission gate of guarded Jobs and Pods against a real
// kube-apiserver (envtest, the binaries `make k8s-bin` builds) on both of its paths, each test once
// per path and wanting the same results:
//
//   - policy: the policies of config/guard, as `kustomize build` ships them (testkit.GuardPolicies,
//     which the envtest and fault suites install too), on the API server as built (1.37);
//   - webhook: a kube-apiserver emulating 1.35 (no MutatingAdmissionPolicy v1, as on such a
//     cluster) with the validating policies of config/guard, and the mutation served on loopback
//     by the manager's own gate (internal/webhook.Gate: cert-controller's rotator against that API
//     server, the generated MutatingWebhookConfiguration of config/webhook).
package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/webhook"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	namespace = "default"
	// timeout bounds the wait for the gate to be in force (testkit.InstallGuard); on the webhook
	// path that includes the first certificate and its stand-in mount.
	timeout = 90 * time.Second

	// The webhook path's objects, as config/webhook and the component name them built alone.
	webhookNamespace     = "lockedjob-system"
	webhookSecret        = "webhook-server-cert"
	webhookService       = "webhook-service"
	webhookConfiguration = "mutating-webhook-configuration"

	// emulatedVersion is the Kubernetes version the webhook path's API server emulates: the last
	// without MutatingAdmissionPolicy v1.
	emulatedVersion = "1.35"
)

// gatePath is one way the gate reaches an API server.
type gatePath struct {
	name string
	k8s  client.Client
	// gate serves the webhook path's mutation; nil on the policy path.
	gate *webhook.Gate
}

const (
	pathPolicy  = "policy"
	pathWebhook = "webhook"
)

var (
	// paths are the API servers of the suite, the policy path first.
	paths []gatePath
	// policies are the objects of config/guard, as kustomize built them.
	policies []*unstructured.Unstructured
	// webhookConfig is the MutatingWebhookConfiguration of config/webhook, as kustomize built it.
	webhookConfig *unstructured.Unstructured
)

// eachPath runs f once per path, as a subtest named after it.
func eachPath(t *testing.T, f func(t *testing.T, k8s client.Client)) {
	t.Helper()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) { f(t, p.k8s) })
	}
}

// pathNamed is the path of that name.
func pathNamed(t *testing.T, name string) gatePath {
	t.Helper()
	for _, p := range paths {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no path %s", name)
	return gatePath{}
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	assets, err := k8sassets.Dir()
	if err != nil {
		return 0, err
	}
	root, err := utils.ProjectDir()
	if err != nil {
		return 0, err
	}
	if policies, err = testkit.GuardPolicies(root); err != nil {
		return 0, err
	}
	built, err := testkit.Kustomize(root, filepath.Join("config", "webhook"))
	if err != nil {
		return 0, err
	}
	for _, o := range built {
		if o.GetKind() == "MutatingWebhookConfiguration" {
			webhookConfig = o
		}
	}
	if webhookConfig == nil {
		return 0, errors.New("config/webhook has no MutatingWebhookConfiguration (run `make manifests`)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	policyEnv := &envtest.Environment{BinaryAssetsDirectory: assets}
	policyK8s, err := start(policyEnv)
	if err != nil {
		return 0, err
	}
	defer func() { _ = policyEnv.Stop() }()
	if err := testkit.InstallGuard(ctx, policyK8s, policies, namespace, timeout); err != nil {
		return 0, err
	}
	paths = append(paths, gatePath{name: pathPolicy, k8s: policyK8s})

	webhookEnv := &envtest.Environment{BinaryAssetsDirectory: assets}
	webhookEnv.ControlPlane.GetAPIServer().Configure().Set("emulated-version", emulatedVersion)
	webhookK8s, err := start(webhookEnv)
	if err != nil {
		return 0, err
	}
	defer func() { _ = webhookEnv.Stop() }()
	gate, err := serveWebhook(ctx, webhookEnv.Config, webhookK8s)
	if err != nil {
		return 0, err
	}
	paths = append(paths, gatePath{name: pathWebhook, k8s: webhookK8s, gate: gate})
	return m.Run(), nil
}

func start(env *envtest.Environment) (client.Client, error) {
	cfg, err := env.Start()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
}

// serveWebhook installs the webhook path on the API server of cfg: the validating policies of
// config/guard, the webhook configuration of config/webhook pointed at loopback, the empty Secret
// the component ships, and the manager's gate serving it; it returns once the gate is in force.
func serveWebhook(ctx context.Context, cfg *rest.Config, k8s client.Client) (*webhook.Gate, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace}}); err != nil {
		return nil, err
	}
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret, Namespace: webhookNamespace}}); err != nil {
		return nil, err
	}
	certDir, err := os.MkdirTemp("", "guard-webhook-")
	if err != nil {
		return nil, err
	}
	go mountSecret(ctx, k8s, certDir)
	gate, err := webhook.New(cfg, clientgoscheme.Scheme, webhook.Options{
		Namespace: webhookNamespace, SecretName: webhookSecret, ServiceName: webhookService,
		ConfigurationName: webhookConfiguration, CertDir: certDir, Host: "127.0.0.1", Port: port,
		ExtraDNSNames: []string{"localhost"},
	})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := gate.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "guard webhook:", err)
		}
	}()
	objs := []*unstructured.Unstructured{loopback(webhookConfig, port)}
	for _, o := range policies {
		if !strings.HasPrefix(o.GetKind(), "Mutating") {
			objs = append(objs, o)
		}
	}
	if err := testkit.InstallGuard(ctx, k8s, objs, namespace, timeout); err != nil {
		return nil, err
	}
	return gate, nil
}

// loopback is the webhook configuration with each webhook's Service replaced by a URL on
// localhost (a name the serving certificate is also for), the same path.
func loopback(config *unstructured.Unstructured, port int) *unstructured.Unstructured {
	o := config.DeepCopy()
	hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
	for _, h := range hooks {
		hook := h.(map[string]any)
		path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
		hook["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://localhost:%d%s", port, path)}
	}
	_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
	return o
}

// mountSecret stands in for the kubelet, which has no place here: it writes the Secret's
// certificate and key into dir whenever they change, as a Secret volume would.
func mountSecret(ctx context.Context, k8s client.Client, dir string) {
	var last string
	for ctx.Err() == nil {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: webhookNamespace, Name: webhookSecret}, s); err == nil &&
			len(s.Data["tls.crt"]) > 0 && string(s.Data["tls.crt"]) != last {
			for _, name := range []string{"tls.key", "tls.crt"} {
				if err := os.WriteFile(filepath.Join(dir, name+".tmp"), s.Data[name], 0o600); err != nil {
					fmt.Fprintln(os.Stderr, "mount guard webhook secret:", err)
					continue
				}
				_ = os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name))
			}
			last = string(s.Data["tls.crt"])
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ready is the gate's readiness check, as the manager's /readyz runs it.
func ready(g *webhook.Gate) error { return g.ReadyCheck()(httptest.NewRequest("GET", "/readyz", nil)) }

// guardedJob is a Job labelled with a lock: two init containers and two containers, the first of
// each with no env and the second with an env list of its own.
func guardedJob(opts ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "guarded-",
			Namespace:    namespace,
			Labels:       map[string]string{batchv1alpha1.LabelGuardLock: "db-migrate"},
		},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "init-bare", Image: "busybox"},
				{Name: "init-env", Image: "busybox", Env: []corev1.EnvVar{{Name: "INIT", Value: "1"}}},
			},
			Containers: []corev1.Container{
				{Name: "main", Image: "busybox"},
				{Name: "side", Image: "busybox", Env: []corev1.EnvVar{
					{Name: "SIDE", Value: "2"},
					// A token copied into the template must not shadow the fence.
					{Name: batchv1alpha1.EnvFencingToken, Value: "12345"},
					{Name: "AFTER", Value: "3"},
				}},
			},
		}}},
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func label(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Labels[k] = v }
}

// unguard takes the lock label off.
func unguard(j *batchv1.Job) { delete(j.Labels, batchv1alpha1.LabelGuardLock) }

func annotate(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		if j.Annotations == nil {
			j.Annotations = map[string]string{}
		}
		j.Annotations[k] = v
	}
}

// policy is the object of config/guard of that name. By name, not by kind: config/guard has more
// than one policy of each kind, and kustomize orders them by name.
func policy(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range policies {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("config/guard has no object %s; it has %d objects", name, len(policies))
	return nil
}

// expressions are every CEL expression of a policy, joined.
func expressions(t *testing.T, o *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(o.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Variables   []struct{ Expression string } `json:"variables"`
		Validations []struct{ Expression string } `json:"validations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, v := range spec.Variables {
		all = append(all, v.Expression)
	}
	for _, v := range spec.Validations {
		all = append(all, v.Expression)
	}
	return strings.Join(all, "\n")
}
