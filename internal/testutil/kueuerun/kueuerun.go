// Package kueuerun installs and starts Kueue's manager, unmodified, on a real API server that
// runs on this machine: the binary `make kueue-bin` builds, its CRDs and webhook configurations
// from its module source, a CA of its own for the webhooks, which the API server reaches on
// 127.0.0.1. test/kueue runs it on envtest; the scale benchmark (test/scale) runs it on the local
// cluster beside lockedjob's operator, to compare the two on the same Jobs.
//
// Kueue is never imported: its go.mod pins other Kubernetes and controller-runtime versions, so
// its objects are unstructured here.
package kueuerun

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
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
)

const (
	// Namespace is Kueue's own namespace (its Configuration's default), where its certificate
	// Secret lives.
	Namespace = "kueue-system"
	// Kueue's internal certificate management, on by default, names its Secret, its webhook
	// configurations and the DNS name of its serving certificate after these (cmd/kueue,
	// pkg/util/cert): kueue-<type>-webhook-configuration, <service>.<namespace>.svc.
	webhookServiceName = "kueue-webhook-service"
	webhookSecretName  = "kueue-webhook-server-cert"
	// QueueNameLabel puts a Job in a LocalQueue (Kueue's constants.QueueLabel).
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
)

// GroupVersion is the Kueue API the tests speak, the storage version of v0.17.0.
var GroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// Object is a Kueue object of kind, name and namespace ("" for cluster scope), with spec.
func Object(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	o.SetGroupVersionKind(GroupVersion.WithKind(kind))
	o.SetNamespace(namespace)
	o.SetName(name)
	return o
}

// List is an empty list of Kueue objects of kind.
func List(kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(GroupVersion.WithKind(kind + "List"))
	return l
}

// Setup is what one Kueue installation is served with: the port of its webhook server on
// 127.0.0.1, the URL the API server calls it at, and the CA and serving certificate.
type Setup struct {
	Source      string // Kueue's module source (Source)
	WebhookPort int
	Base        string // https://127.0.0.1:<WebhookPort>
	PKI         *PKI
}

// NewSetup finds Kueue's module source below the repository root and makes a PKI and a free
// webhook port for one installation.
func NewSetup(root string) (*Setup, error) {
	src, err := Source(root)
	if err != nil {
		return nil, err
	}
	port, err := ports.Free()
	if err != nil {
		return nil, err
	}
	pki, err := NewPKI(webhookServiceName + "." + Namespace + ".svc")
	if err != nil {
		return nil, err
	}
	return &Setup{Source: src, WebhookPort: port, Base: "https://" + ports.Addr(port), PKI: pki}, nil
}

// Source is the folder of Kueue's module source at the version hack/kueue pins, in the module
// cache `make kueue-bin` filled; root is the repository's.
func Source(root string) (string, error) {
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

// CRDs reads Kueue's CRDs and gives those its certificate manager expects to serve conversion for
// (pkg/util/cert) the conversion webhook Kueue's kustomize patches give them
// (config/components/crd/patches), at the setup's base instead of its Service.
func (s *Setup) CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir := filepath.Join(s.Source, "config", "components", "crd", "bases")
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
			url := s.Base + "/convert"
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: s.PKI.CAPEM},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// InstallPrerequisites creates Kueue's namespace, its certificate Secret seeded with the setup's
// CA and serving certificate, and its webhook configurations pointed at the setup's base. With
// namespaces set, Kueue's webhooks act only in namespaces of those labels, as a Kueue installation
// that manages some namespaces only would (its Helm chart's managedJobsNamespaceSelector): a
// cluster shared with other work must not depend on Kueue running.
//
// Kueue's internal certificate management stays on, because with it off Kueue reads its metrics
// certificate from the fixed path /etc/kueue/metrics/certs. Its rotator keeps a Secret it finds
// valid (the CA for "kueue-ca", the serving certificate for the Service's DNS name, both far from
// expiry); the seeded one is, and its serving certificate also names 127.0.0.1, where the API
// server calls the webhooks. The rotator writes the same CA into the configurations it manages.
func (s *Setup) InstallPrerequisites(ctx context.Context, c client.Client, namespaces map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSecretName, Namespace: Namespace},
		Data: map[string][]byte{
			"ca.crt": s.PKI.CAPEM, "ca.key": s.PKI.CAKeyPEM, "tls.crt": s.PKI.CertPEM, "tls.key": s.PKI.KeyPEM,
		},
	}
	if err := c.Create(ctx, secret); err != nil {
		return fmt.Errorf("create secret %s: %w", webhookSecretName, err)
	}
	whs, err := s.webhookConfigurations(namespaces)
	if err != nil {
		return err
	}
	for _, wh := range whs {
		if err := c.Create(ctx, wh); err != nil {
			return fmt.Errorf("create %s %s: %w", wh.GetKind(), wh.GetName(), err)
		}
	}
	return nil
}

// webhookConfigurations reads Kueue's Mutating and ValidatingWebhookConfiguration, named as its
// kustomize prefix names them, each webhook's clientConfig rewritten from the Service to
// base+path with the CA, and scoped to namespaces of the given labels if any.
func (s *Setup) webhookConfigurations(namespaces map[string]string) ([]*unstructured.Unstructured, error) {
	path := filepath.Join(s.Source, "config", "components", "webhook", "manifests.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var selector map[string]any
	if len(namespaces) > 0 {
		labels := map[string]any{}
		for k, v := range namespaces {
			labels[k] = v
		}
		selector = map[string]any{"matchLabels": labels}
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
			hook["clientConfig"] = map[string]any{"url": s.Base + p, "caBundle": base64.StdEncoding.EncodeToString(s.PKI.CAPEM)}
			if selector != nil {
				// Ignored for cluster-scoped objects (ClusterQueues, ResourceFlavors): those are
				// Kueue's own and always go through its webhooks.
				hook["namespaceSelector"] = selector
			}
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

// InstallCRDs creates crds (those already there are left as they are) and waits until each is
// Established.
func InstallCRDs(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition, timeout time.Duration) error {
	for _, crd := range crds {
		if err := c.Create(ctx, crd.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, crd := range crds {
		for {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
				return fmt.Errorf("get CRD %s: %w", crd.Name, err)
			}
			if established(got) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not Established within %s", crd.Name, timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// Launch is how to start one Kueue manager: its arguments and environment, and where it says it
// is ready.
type Launch struct {
	Args       []string
	Env        []string // KUBECONFIG=...
	HealthAddr string
	// PprofAddr serves Go's /debug/pprof on loopback, for a profile of Kueue's own CPU (its
	// metrics endpoint needs a token; this does not). It costs nothing until it is asked.
	PprofAddr string
}

// Prepare writes Kueue's Configuration and the Secret's files into dir and returns how to start
// Kueue's manager with the kubeconfig at kubeconfig. The Job integration alone is on: every other
// framework's webhook is a no-op. Its controllers run as many reconciles at once as Kueue's shipped
// Configuration says (shippedController). qps and burst are its API client's limits
// (clientConnection); 0 keeps Kueue's built-in defaults (20 and 30; the shipped Configuration says
// 50 and 100).
func (s *Setup) Prepare(dir, kubeconfig string, qps float32, burst int) (Launch, error) {
	healthAddr, err := ports.FreeAddr()
	if err != nil {
		return Launch{}, err
	}
	metricsAddr, err := ports.FreeAddr()
	if err != nil {
		return Launch{}, err
	}
	pprofAddr, err := ports.FreeAddr()
	if err != nil {
		return Launch{}, err
	}
	// The Secret's files, where a Pod would mount it: the rotator only waits for them.
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return Launch{}, err
	}
	for name, b := range map[string][]byte{"ca.crt": s.PKI.CAPEM, "tls.crt": s.PKI.CertPEM, "tls.key": s.PKI.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return Launch{}, err
		}
	}
	// Kueue v0.17.0 reads config.kueue.x-k8s.io/v1beta2 (apis/config/v1beta2; v1beta1 is the
	// older one).
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
leaderElection:
  leaderElect: false
health:
  healthProbeBindAddress: %s
metrics:
  bindAddress: %s
pprofBindAddress: %s
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
`, Namespace, healthAddr, metricsAddr, pprofAddr, s.WebhookPort, certDir, webhookServiceName, webhookSecretName)
	shipped, err := s.shippedController()
	if err != nil {
		return Launch{}, err
	}
	config += shipped
	if qps > 0 {
		config += fmt.Sprintf("clientConnection:\n  qps: %g\n  burst: %d\n", qps, burst)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return Launch{}, err
	}
	// The visibility server (an aggregated API on a port of its own) is not needed here. The log
	// stays at Kueue's default level (info), as a user would run it.
	return Launch{
		Args:       []string{"--config", cfgPath, "--feature-gates=VisibilityOnDemand=false"},
		Env:        []string{"KUBECONFIG=" + kubeconfig},
		HealthAddr: healthAddr,
		PprofAddr:  pprofAddr,
	}, nil
}

// shippedController is the `controller` section of the Configuration Kueue's manifests install
// (config/components/manager/controller_manager_config.yaml), as YAML: how many reconciles of each
// kind run at once (Job.batch and Workload 5, the queues 1). Without it each of Kueue's controllers
// runs one reconcile at a time, controller-runtime's default: at 5,000 Jobs the Job reconciler alone
// then paces creating Workloads and starting admitted Jobs (about 10 a second), which is no
// Kueue a user installs.
func (s *Setup) shippedController() (string, error) {
	path := filepath.Join(s.Source, "config", "components", "manager", "controller_manager_config.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the Configuration Kueue ships: %w", err)
	}
	var shipped struct {
		Controller map[string]any `json:"controller"`
	}
	if err := yaml.Unmarshal(raw, &shipped); err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	if len(shipped.Controller) == 0 {
		return "", fmt.Errorf("%s has no controller section", path)
	}
	out, err := yaml.Marshal(map[string]any{"controller": shipped.Controller})
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// WaitReady polls Kueue's readiness endpoint and its webhook server until both answer, the latter
// with a certificate for 127.0.0.1 of the setup's CA (as the API server will check it). It gives
// up when exited is closed (Kueue is gone) or timeout passes.
func (s *Setup) WaitReady(ctx context.Context, l Launch, exited <-chan struct{}, timeout time.Duration) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.PKI.CAPEM) {
		return errors.New("the setup's CA does not parse")
	}
	hc := &http.Client{Timeout: time.Second}
	ready := func() bool {
		resp, err := hc.Get("http://" + l.HealthAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		conn, err := tls.Dial("tcp", ports.Addr(s.WebhookPort), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	deadline := time.Now().Add(timeout)
	for !ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("kueue exited before it was ready")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kueue not ready within %s", timeout)
		}
	}
	return nil
}
