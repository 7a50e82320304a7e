// Package cluster_test is a smoke test of hack/cluster.sh: it brings up a
// separate local control plane (own folder, own ports), runs a Job that
// completes and one that fails on kwok's fake nodes, and tears it down.
package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/test/utils"
)

type cluster struct {
	t *testing.T
	utils.LocalCluster
	started map[string]int
}

func TestLocalClusterRunsJobs(t *testing.T) {
	c := newCluster(t)

	t.Cleanup(c.downAndCheck) // safe even if up fails half-way
	start := time.Now()
	out := c.script(3*time.Minute, "up")
	t.Logf("cluster up in %s (ports %d..%d, dir %s)", time.Since(start).Round(time.Millisecond), c.PortBase, c.PortBase+5, c.Dir)
	c.recordPIDs()

	if again := c.script(time.Minute, "up"); !strings.Contains(again, "already up") {
		t.Errorf("second up did not report the cluster as already up:\n%s\n(first up said:\n%s)", again, out)
	}
	kubeconfig := strings.TrimSpace(c.script(10*time.Second, "env"))
	if want := filepath.Join(c.Dir, "kubeconfig"); kubeconfig != want {
		t.Fatalf("env printed %q, want %q", kubeconfig, want)
	}
	c.script(30*time.Second, "status")

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	ready := 0
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
				ready++
			}
		}
	}
	if ready < 2 {
		t.Fatalf("want >= 2 Ready untainted nodes, got %d of %d", ready, len(nodes.Items))
	}

	fast := map[string]string{}
	for _, stage := range []string{"pod-create", "pod-ready", "pod-complete", "pod-container-running-failed"} {
		fast[stage+".stage.kwok.x-k8s.io/delay"] = "100ms"
		fast[stage+".stage.kwok.x-k8s.io/jitter-delay"] = "200ms"
	}
	okJob := job("smoke-complete", fast, nil)
	failJob := job("smoke-fail", fast, map[string]string{"pod-container-running-failed.stage.kwok.x-k8s.io": "true"})
	for _, j := range []*batchv1.Job{okJob, failJob} {
		if _, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create job %s: %v", j.Name, err)
		}
	}
	created := time.Now()
	waitJob(ctx, t, cs, okJob.Name, batchv1.JobComplete)
	t.Logf("job %s Complete after %s", okJob.Name, time.Since(created).Round(time.Millisecond))
	waitJob(ctx, t, cs, failJob.Name, batchv1.JobFailed)
	t.Logf("job %s Failed after %s", failJob.Name, time.Since(created).Round(time.Millisecond))
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "cluster.sh")); err != nil {
		t.Fatalf("hack/cluster.sh not found from %s: %v", root, err)
	}
	binDir, err := k8sassets.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, b := range append([]string{"kubectl"}, utils.ControlPlane...) {
		if fi, err := os.Stat(filepath.Join(binDir, b)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("local cluster binaries %v missing in %s: run `make k8s-bin` (or hack/k8s-bin.sh) first; "+
			"the first build takes ~10 min", missing, binDir)
	}
	// Away from the script's default base, so a developer's own cluster is never disturbed.
	base, err := utils.FreeClusterPorts(0)
	if err != nil {
		t.Fatal(err)
	}
	// kwok only: TestRealNode covers the real node, and this test must pass where none can run.
	lc := utils.LocalCluster{Root: root, Dir: t.TempDir(), PortBase: base, BinDir: binDir,
		Env: []string{"LOCKEDJOB_REAL_NODE=0"}}
	return &cluster{t: t, LocalCluster: lc, started: map[string]int{}}
}

// script runs hack/cluster.sh with this cluster's folder and ports; it fails
// the test (with the script's output) if the script fails.
func (c *cluster) script(timeout time.Duration, args ...string) string {
	c.t.Helper()
	out, err := c.Script(timeout, args...)
	if err != nil {
		c.t.Fatal(err) // names the command line and carries its output
	}
	return out
}

func (c *cluster) recordPIDs() {
	c.t.Helper()
	for _, name := range utils.ControlPlane {
		pid, err := c.PID(name)
		if err != nil {
			c.t.Fatalf("after up: %v", err)
		}
		if !c.alive(name, pid) {
			c.t.Fatalf("after up, %s (pid %d) is not running", name, pid)
		}
		c.started[name] = pid
	}
}

// alive reports whether pid is a live (non-zombie) process running the
// component's binary from binDir.
func (c *cluster) alive(name string, pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(filepath.Join(c.BinDir, name))
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != want {
		return false
	}
	return utils.ProcessAlive(pid)
}

func (c *cluster) downAndCheck() {
	if _, err := c.Down(2 * time.Minute); err != nil {
		c.t.Error(err) // names the command line and carries its output, or the process left
	}
	// Stricter than Down: the PIDs are those seen running after up, and each must be the
	// component's own binary, so a recycled PID is not taken for a survivor.
	for name, pid := range c.started {
		if c.alive(name, pid) {
			c.t.Errorf("after down, %s (pid %d) is still running", name, pid)
		}
	}
	if out, err := c.Script(30*time.Second, "status"); err == nil {
		c.t.Errorf("status after down exited 0:\n%s", out)
	}
}

func job(name string, annotations, labels map[string]string) *batchv1.Job {
	backoff := int32(0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: annotations, Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "work", Image: "example.invalid/smoke:1"}},
				},
			},
		},
	}
}

// waitJob polls the Job until it has condition want=True; it fails on the
// opposite terminal condition or when ctx expires.
func waitJob(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, want batchv1.JobConditionType) {
	t.Helper()
	other := batchv1.JobFailed
	if want == batchv1.JobFailed {
		other = batchv1.JobComplete
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last *batchv1.Job
	for {
		j, err := cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = j
			for _, cond := range j.Status.Conditions {
				if cond.Status != corev1.ConditionTrue {
					continue
				}
				switch cond.Type {
				case want:
					return
				case other:
					t.Fatalf("job %s became %s (%s: %s), want %s", name, other, cond.Reason, cond.Message, want)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s not %s before the deadline; last error %v; last status %+v", name, want, err, statusOf(last))
		case <-tick.C:
		}
	}
}

func statusOf(j *batchv1.Job) any {
	if j == nil {
		return nil
	}
	return j.Status
}
