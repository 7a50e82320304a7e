package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestTokenKeyOnlyInAToldNamespace: without --namespace or POD_NAMESPACE (and without
// --token-key-file) the operator must not create its token-key Secret in whatever namespace the
// kubeconfig names, where it would make a second key that nobody guards and that a deployed
// operator does not use (issue 9 item 24). It runs the real run() against a real API server.
func TestTokenKeyOnlyInAToldNamespace(t *testing.T) {
	env, c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const kubeconfigNS = "picked-by-kubeconfig"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeconfigNS}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", writeKubeconfig(t, env, kubeconfigNS))
	t.Setenv("POD_NAMESPACE", "")
	redisSrv := redisserver.Start(t)

	o := options{
		metricsAddr: "0", probeAddr: "0",
		redisAddr: redisSrv.Addr(), keyPrefix: "lockedjob:", releaseChannel: "lockedjob:released",
		clusterID: "test", statusInterval: time.Second, waitBackoffMax: time.Second,
		redlockNodeTimeout: 50 * time.Millisecond, maxConcurrentReconciles: 1,
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()

	secret := client.ObjectKey{Namespace: kubeconfigNS, Name: locks.TokenSecretName}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			if err := c.Get(ctx, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Fatalf("token-key Secret in the kubeconfig's namespace: get = %v, want NotFound", err)
			}
			if err == nil || !strings.Contains(err.Error(), "--namespace") {
				t.Fatalf("run = %v, want a refusal that names --namespace", err)
			}
			return
		case <-poll.C:
			if err := c.Get(ctx, secret, &corev1.Secret{}); err == nil {
				t.Fatalf("the operator created its token-key Secret in %s, a namespace only the kubeconfig named", kubeconfigNS)
			}
		case <-ctx.Done():
			t.Fatal("run neither refused nor created the Secret within a minute")
		}
	}
}

// startAPIServer starts a real API server with the LockedJob CRD and returns an admin client.
func startAPIServer(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	assets, err := k8sassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// writeKubeconfig writes a kubeconfig for an admin of env whose context names namespace.
func writeKubeconfig(t *testing.T, env *envtest.Environment, namespace string) string {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = namespace
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}
