package plugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
)

// The suite runs the plugin's commands in process against a real kube-apiserver and etcd (envtest,
// with the binaries this project builds) with the LockedJob CRD installed. No operator runs: specs
// write LockedJob status through the status subresource, as the operator would, and read what the
// commands print.

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

var (
	ctx        context.Context
	cancel     context.CancelFunc
	testEnv    *envtest.Environment
	k8sClient  client.Client
	kubeconfig string
)

func TestPlugin(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "kubectl-lockedjob Suite")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)

	assets, err := k8sassets.Dir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	// The commands connect as a user does: through a kubeconfig file and the kubectl flags.
	admin, err := testEnv.AddUser(envtest.User{Name: "plugin-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = writeKubeconfig(admin)
})

var _ = AfterSuite(func() {
	cancel()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// writeKubeconfig writes user's kubeconfig into the API server's own temporary folder, which
// testEnv.Stop removes.
func writeKubeconfig(user *envtest.AuthenticatedUser) string {
	GinkgoHelper()
	b, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	f, err := os.CreateTemp(testEnv.ControlPlane.APIServer.CertDir, "plugin-*.kubeconfig")
	Expect(err).NotTo(HaveOccurred())
	_, err = f.Write(b)
	Expect(err).NotTo(HaveOccurred())
	Expect(f.Close()).To(Succeed())
	return f.Name()
}

// result is what one run of the plugin left.
type result struct {
	code           int
	stdout, stderr string
}

// runPlugin runs `kubectl lockedjob args...` with the suite's kubeconfig and the clock at now.
func runPlugin(now time.Time, args ...string) result {
	return runPluginAs(kubeconfig, now, args...)
}

func runPluginAs(kubeconfigPath string, now time.Time, args ...string) result {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}
	code := run(streams, append([]string{"--kubeconfig", kubeconfigPath}, args...), func() time.Time { return now })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}
