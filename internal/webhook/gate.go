// Package webhook serves the admission gate of guarded Jobs and Pods as a mutating webhook, with
// certificates the process rotates itself (open-policy-agent/cert-controller): the path for
// clusters without MutatingAdmissionPolicy (docs/design.md, "Before 1.36").
//
// The gate lives as long as the process, on every replica, beside the leader-elected managers
// that come and go with leadership (internal/campaign): a replica that lost its leadership keeps
// admitting Jobs and Pods while it campaigns again.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	webhookv1 "github.com/lockedjob/lockedjob/internal/webhook/v1"
)

// Options say where the gate's objects are. The defaults are the names config/default gives
// them (namePrefix lockedjob-) with config/components/guard-webhook.
type Options struct {
	// Namespace is the operator's: the Secret and the Service live there.
	Namespace string
	// SecretName is the Secret that holds the CA and the serving certificate. It must exist (the
	// rotator updates it, it does not create it); the Deployment mounts it at CertDir.
	SecretName string
	// ServiceName is the Service in front of the webhook; the serving certificate is for
	// <ServiceName>.<Namespace>.svc.
	ServiceName string
	// ConfigurationName is the MutatingWebhookConfiguration whose caBundle the rotator writes.
	ConfigurationName string
	// ExtraDNSNames are names the serving certificate is for beside the Service's (a test that
	// serves on loopback names localhost).
	ExtraDNSNames []string
	// CertDir is where the Secret's tls.crt and tls.key appear (a volume of the Secret).
	CertDir string
	// Host and Port are where the webhook server listens.
	Host string
	Port int
}

// Defaults of Options, as config/components/guard-webhook names the objects.
const (
	DefaultSecretName        = "lockedjob-webhook-server-cert"
	DefaultServiceName       = "lockedjob-webhook-service"
	DefaultConfigurationName = "lockedjob-mutating-webhook-configuration"
	DefaultCertDir           = "/tmp/k8s-webhook-server/serving-certs"
	DefaultPort              = 9443
)

// Gate is the webhook server with its certificate rotator, on a manager of its own that never
// campaigns.
type Gate struct {
	mgr   ctrl.Manager
	ready chan struct{}
}

// New builds the gate over cfg. Nothing runs before Start.
func New(cfg *rest.Config, scheme *runtime.Scheme, o Options) (*Gate, error) {
	if o.Namespace == "" {
		return nil, errors.New("guard webhook: the operator's namespace is not known (--namespace or $POD_NAMESPACE)")
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          crwebhook.NewServer(crwebhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir}),
	})
	if err != nil {
		return nil, fmt.Errorf("guard webhook manager: %w", err)
	}
	g := &Gate{mgr: mgr, ready: make(chan struct{})}
	err = rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CAName:         "lockedjob-ca",
		CAOrganization: "lockedjob",
		DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		ExtraDNSNames:  o.ExtraDNSNames,
		IsReady:        g.ready,
		Webhooks:       []rotator.WebhookInfo{{Name: o.ConfigurationName, Type: rotator.Mutating}},
		// Every replica serves the webhook, so every replica needs the certificate: the
		// rotator's writes are idempotent updates of one Secret, guarded by its resourceVersion.
		RequireLeaderElection: false,
		// A rotated certificate is picked up by the server's certificate watcher; no restart.
		RestartOnSecretRefresh: false,
		EnableReadinessCheck:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("guard webhook certificate rotator: %w", err)
	}
	return g, nil
}

// Start runs the rotator and, once the certificates are in CertDir and the CA in the webhook
// configuration, the webhook server, until ctx ends.
func (g *Gate) Start(ctx context.Context) error {
	go func() {
		select {
		case <-g.ready:
		case <-ctx.Done():
			return
		}
		// Registering starts the server: the manager adds it on first use, and it runs at once.
		// Neither setup fails today (each only registers a path).
		for _, setup := range []func(ctrl.Manager) error{webhookv1.SetupJobWebhookWithManager, webhookv1.SetupPodWebhookWithManager} {
			if err := setup(g.mgr); err != nil {
				ctrl.Log.WithName("guard-webhook").Error(err, "Setting up the guard webhook failed")
			}
		}
	}()
	return g.mgr.Start(ctx)
}

// ReadyCheck is ready once the certificates are ready and the webhook server serves: a replica
// that is not gets no admission reviews through the Service.
func (g *Gate) ReadyCheck() healthz.Checker {
	return func(req *http.Request) error {
		select {
		case <-g.ready:
			return g.mgr.GetWebhookServer().StartedChecker()(req)
		default:
			return errors.New("guard webhook certificates are not ready")
		}
	}
}
