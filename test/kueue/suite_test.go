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
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
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
	root, err := utils.ProjectDir()
	if err != nil {
		return 0, err
	}
	setup, err := kueuerun.NewSetup(root)
	if err != nil {
		return 0, err
	}
	crds, err := setup.CRDs()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "lockedjob-kueue-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

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
	ctx := context.Background()
	if err := kueuerun.InstallCRDs(ctx, k8s, crds, startTimeout); err != nil {
		return 0, fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	if err := setup.InstallPrerequisites(ctx, k8s, nil); err != nil {
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
	k, err := startKueue(ctx, bin, dir, kubeconfig, setup)
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

// kueueProcess is Kueue's manager, running.
type kueueProcess struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// startKueue writes Kueue's kubeconfig and Configuration into dir, starts the manager and waits
// until it is ready and its webhook server answers.
func startKueue(ctx context.Context, bin, dir string, kubeconfig []byte, setup *kueuerun.Setup) (*kueueProcess, error) {
	kcPath := filepath.Join(dir, "kueue.kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	launch, err := setup.Prepare(dir, kcPath, 0, 0)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "kueue.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()

	// Verbose: the log is what a failing test shows of Kueue.
	cmd := exec.Command(bin, append(launch.Args, "--zap-log-level=2")...)
	cmd.Env = append(os.Environ(), launch.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	k := &kueueProcess{cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() { _ = cmd.Wait(); close(k.exited) }()

	if err := setup.WaitReady(ctx, launch, k.exited, startTimeout); err != nil {
		k.stop()
		return nil, fmt.Errorf("%w (%v)\n--- kueue log (last 80 lines):\n%s", err, cmd.ProcessState, utils.TailFile(logPath, 80))
	}
	return k, nil
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
