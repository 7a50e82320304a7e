// Package kueue_test runs Kueue's manager, unmodified, against a real kube-apiserver (envtest, the
// binaries `make k8s-bin` builds), as the process `make kueue-bin` builds, with Kueue's CRDs and
// webhook configurations from its module source. It proves what the Kueue integration of
// docs/design.md stands on: Kueue admits a Job of its queue, and a ClusterQueue's AdmissionCheck
// of controller batch.lockedjob.dev/lock holds the Workload until the check is Ready, whose
// podSetUpdates Kueue then writes into the Job's pod template as it unsuspends it; a check set to
// Retry after that evicts the Workload, and Kueue takes them out again. The operator's own
// reconcilers then answer for that check on a real redis-server (operator_test.go).
//
// Kueue is never imported: its go.mod pins other Kubernetes and controller-runtime versions, so
// its objects are unstructured here.
package kueue_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	// kueueNamespace is Kueue's own namespace (its Configuration's default), where its certificate
	// Secret lives.
	kueueNamespace = "kueue-system"
	// Kueue's internal certificate management, on by default, names its Secret, its webhook
	// configurations and the DNS name of its serving certificate after these (cmd/kueue,
	// pkg/util/cert): kueue-<type>-webhook-configuration, <service>.<namespace>.svc.
	webhookServiceName = "kueue-webhook-service"
	webhookSecretName  = "kueue-webhook-server-cert"
	// startTimeout bounds Kueue's start: certificates, caches, webhook server.
	startTimeout = 90 * time.Second
	// timeout bounds every wait for Kueue to act on an object.
	timeout = 30 * time.Second
	// poll is the interval of those waits.
	poll = 100 * time.Millisecond
)

// k8s is the test's client; it reads Kueue's objects as unstructured.
var k8s client.Client

// restConfig reaches the suite's API server, for the operator the lock tests start.
var restConfig *rest.Config

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
	bin, err := k8sassets.Kueue()
	if err != nil {
		return 0, err
	}
	src, err := kueueSource()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "lockedjob-kueue-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	webhookPort, err := ports.Free()
	if err != nil {
		return 0, err
	}
	pki, err := newPKI(webhookServiceName + "." + kueueNamespace + ".svc")
	if err != nil {
		return 0, err
	}
	base := "https://" + ports.Addr(webhookPort)
	crds, err := kueueCRDs(filepath.Join(src, "config", "components", "crd", "bases"), base, pki.caPEM)
	if err != nil {
		return 0, err
	}

	root, err := utils.ProjectDir()
	if err != nil {
		return 0, err
	}
	// lockedjob's own CRDs too, for the operator the lock tests start (operator_test.go).
	env := &envtest.Environment{BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	restConfig = cfg
	if k8s, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
		return 0, err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		return 0, fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	ctx := context.Background()
	if err := installKueuePrerequisites(ctx, filepath.Join(src, "config", "components", "webhook", "manifests.yaml"),
		base, pki); err != nil {
		return 0, err
	}

	user, err := env.AddUser(envtest.User{Name: "kueue", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return 0, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return 0, err
	}
	k, err := startKueue(bin, dir, kubeconfig, webhookPort, pki)
	if err != nil {
		return 0, err
	}
	defer k.stop()

	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- kueue log (last 80 lines, %s):\n%s\n", k.logPath, utils.TailFile(k.logPath, 80))
	}
	return code, nil
}

// kueueSource is the folder of Kueue's module source at the version hack/kueue pins, in the
// module cache `make kueue-bin` filled.
func kueueSource() (string, error) {
	root, err := utils.ProjectDir()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-json", "sigs.k8s.io/kueue")
	cmd.Dir = filepath.Join(root, "hack", "kueue")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m sigs.k8s.io/kueue in hack/kueue: %w: run `make kueue-bin` first", err)
	}
	var mod struct{ Version, Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	if mod.Version != k8sassets.KueueVersion || mod.Dir == "" {
		return "", fmt.Errorf("hack/kueue resolves sigs.k8s.io/kueue %s at %q; want %s in the module cache: "+
			"run `make kueue-bin`", mod.Version, mod.Dir, k8sassets.KueueVersion)
	}
	return mod.Dir, nil
}

// kueueCRDs reads Kueue's CRDs and gives those its certificate manager expects to serve
// conversion for (pkg/util/cert) the conversion webhook Kueue's kustomize patches give them
// (config/components/crd/patches), at base instead of its Service.
func kueueCRDs(dir, base string, caPEM []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	converted := map[string]bool{
		"localqueues": true, "clusterqueues": true, "workloads": true, "cohorts": true, "multikueueclusters": true,
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if converted[crd.Spec.Names.Plural] {
			url := base + "/convert"
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// installKueuePrerequisites creates Kueue's namespace, its certificate Secret seeded with the
// test's CA and serving certificate, and its webhook configurations pointed at base.
//
// Kueue's internal certificate management stays on, because with it off Kueue reads its metrics
// certificate from the fixed path /etc/kueue/metrics/certs. Its rotator keeps a Secret it finds
// valid (the CA for "kueue-ca", the serving certificate for the Service's DNS name, both far from
// expiry); the seeded one is, and its serving certificate also names 127.0.0.1, where the API
// server calls the webhooks. The rotator writes the same CA into the configurations it manages.
func installKueuePrerequisites(ctx context.Context, manifests, base string, pki *pki) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}}
	if err := k8s.Create(ctx, ns); err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSecretName, Namespace: kueueNamespace},
		Data: map[string][]byte{
			"ca.crt": pki.caPEM, "ca.key": pki.caKeyPEM, "tls.crt": pki.certPEM, "tls.key": pki.keyPEM,
		},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		return err
	}
	whs, err := webhookConfigurations(manifests, base, pki.caPEM)
	if err != nil {
		return err
	}
	for _, wh := range whs {
		if err := k8s.Create(ctx, wh); err != nil {
			return fmt.Errorf("creating %s %s: %w", wh.GetKind(), wh.GetName(), err)
		}
	}
	return nil
}

// webhookConfigurations reads Kueue's Mutating and ValidatingWebhookConfiguration, named as its
// kustomize prefix names them, each webhook's clientConfig rewritten from the Service to
// base+path with the CA.
func webhookConfigurations(path, base string, caPEM []byte) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(o.Object) == 0 {
			continue
		}
		o.SetName("kueue-" + o.GetName())
		hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		if err != nil {
			return nil, err
		}
		for i, h := range hooks {
			hook := h.(map[string]any)
			p, found, err := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if err != nil || !found {
				return nil, fmt.Errorf("%s: webhook %v has no clientConfig.service.path", path, hook["name"])
			}
			hook["clientConfig"] = map[string]any{"url": base + p, "caBundle": base64.StdEncoding.EncodeToString(caPEM)}
			hooks[i] = hook
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("%s holds %d webhook configurations; want the mutating and the validating one", path, len(out))
	}
	return out, nil
}

// kueueProcess is Kueue's manager, running.
type kueueProcess struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// startKueue writes Kueue's kubeconfig and Configuration into dir, starts the manager and waits
// until it is ready and its webhook server answers.
func startKueue(bin, dir string, kubeconfig []byte, webhookPort int, pki *pki) (*kueueProcess, error) {
	healthAddr, err := ports.FreeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := ports.FreeAddr()
	if err != nil {
		return nil, err
	}
	kcPath := filepath.Join(dir, "kueue.kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	// The Secret's files, where a Pod would mount it: the rotator only waits for them.
	certDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"ca.crt": pki.caPEM, "tls.crt": pki.certPEM, "tls.key": pki.keyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	// Kueue v0.17.0 reads config.kueue.x-k8s.io/v1beta2 (apis/config/v1beta2; v1beta1 is the
	// older one). The Job integration alone: every other framework's webhook is a no-op.
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
leaderElection:
  leaderElect: false
health:
  healthProbeBindAddress: %s
metrics:
  bindAddress: %s
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
internalCertManagement:
  enable: true
  webhookServiceName: %s
  webhookSecretName: %s
integrations:
  frameworks:
  - batch/job
`, kueueNamespace, healthAddr, metricsAddr, webhookPort, certDir,
		webhookServiceName, webhookSecretName)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "kueue.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()

	// The visibility server (an aggregated API on a port of its own) is not needed here.
	cmd := exec.Command(bin, "--config", cfgPath, "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kcPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	k := &kueueProcess{cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() { _ = cmd.Wait(); close(k.exited) }()

	if err := k.waitReady(healthAddr, webhookPort, pki.caPEM); err != nil {
		k.stop()
		return nil, fmt.Errorf("%w\n--- kueue log (last 80 lines):\n%s", err, utils.TailFile(logPath, 80))
	}
	return k, nil
}

// waitReady polls Kueue's readiness endpoint and its webhook server until both answer, the latter
// with a certificate for 127.0.0.1 of the test's CA (as the API server will check it), Kueue exits
// or startTimeout passes.
func (k *kueueProcess) waitReady(healthAddr string, webhookPort int, caPEM []byte) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("the test's CA does not parse")
	}
	hc := &http.Client{Timeout: time.Second}
	ready := func() bool {
		resp, err := hc.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		conn, err := tls.Dial("tcp", ports.Addr(webhookPort), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	deadline := time.Now().Add(startTimeout)
	for !ready() {
		select {
		case <-k.exited:
			return fmt.Errorf("kueue exited before it was ready: %v", k.cmd.ProcessState)
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kueue not ready within %s", startTimeout)
		}
	}
	return nil
}

// stop ends Kueue with SIGTERM, and with SIGKILL if it has not exited 10 s later.
func (k *kueueProcess) stop() {
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(10 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
}
