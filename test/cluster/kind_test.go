package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/test/utils"
)

// kindComponents are the processes hack/kind.sh records for its Docker daemon, with the binary
// each one runs (a PID that runs another binary after down was reused).
var kindComponents = map[string]string{"dockerns": "sleep", "containerd": "containerd", "dockerd": "dockerd"}

// kindHostPaths are what Docker, containerd and kind would create at fixed places on the host
// unless the daemon's mount namespace and configuration keep them in its folder.
var kindHostPaths = []string{
	"/lib/modules", "/etc/docker/key.json", "/run/containerd", "/run/docker", "/run/docker.sock",
	"/var/lib/docker", "/run/lockedjob-kind",
}

// kindSysctls are system-wide settings a privileged kind node could write through /proc/sys
// (kubelet's kernel tunables, systemd's limits) besides the host's forwarding.
var kindSysctls = append(slices.Clone(watchedSysctls),
	"/proc/sys/vm/panic_on_oom", "/proc/sys/kernel/keys/root_maxkeys", "/proc/sys/kernel/keys/root_maxbytes",
	"/proc/sys/fs/nr_open", "/proc/sys/fs/file-max", "/proc/sys/kernel/pid_max",
)

// kindWorkers is the worker count TestKindCluster asks hack/kind.sh for: one, beside the control
// plane, so pods of two nodes must reach each other.
const kindWorkers = 1

// TestKindCluster runs hack/kind.sh up in its own folder (the project's dockerd and node image,
// offline), checks that the control plane and the worker are Ready and CoreDNS and kube-proxy
// run, loads an image with `kind load image-archive` and runs a pod of it that resolves
// kubernetes.default through the cluster's DNS and a pod on the worker that reaches a pod on the
// control plane, then runs down and checks that nothing is left: no process of the run, no mount
// under its folder, no bridge, veth or cgroup of it, no Docker state, no host path or sysctl
// changed. It needs root and the node image (make kind-node-image, ~15 min the first time), so it
// runs only with LOCKEDJOB_TEST_KIND=1 (make test-kind-cluster).
func TestKindCluster(t *testing.T) {
	if os.Getenv("LOCKEDJOB_TEST_KIND") != "1" {
		t.Skip("set LOCKEDJOB_TEST_KIND=1 (make test-kind-cluster): it builds a node image and runs a Docker daemon")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the project's Docker daemon needs root (dockerd, containerd, a bridge); run as root")
	}
	k := newKind(t)
	existed := map[string]bool{}
	for _, p := range kindHostPaths {
		existed[p] = exists(p)
	}
	sysctls := readSysctlsOf(t, kindSysctls)
	helloTar := buildHelloImage(t, k.root)

	downDone := false
	t.Cleanup(func() {
		if !downDone {
			if out, err := k.script(5*time.Minute, "down"); err != nil {
				t.Errorf("cleanup down: %v\n%s", err, out)
			}
		}
	})
	start := time.Now()
	if out, err := k.script(40*time.Minute, "up"); err != nil {
		t.Fatalf("up: %v", err) // the error carries the output
	} else {
		t.Logf("kind cluster %s up in %s (dir %s):\n%s", k.name, time.Since(start).Round(time.Millisecond), k.dir,
			lastLines(out, 6))
	}
	pids := k.recordPIDs()
	netIndex := strings.TrimSpace(readFile(t, filepath.Join(k.dir, "net-index")))
	bridge, cgroup := "ljkind-"+netIndex, "lockedjob-kind-"+netIndex

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := k.clientset()
	nodes := waitNodesReady(ctx, t, cs, 1+kindWorkers)
	for _, node := range nodes {
		t.Logf("node %s Ready (%s, pods %s, kubelet %s, %s)", node.Name, internalIP(&node), node.Spec.PodCIDR,
			node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	waitSystemPods(ctx, t, cs, "k8s-app=kube-dns")
	waitSystemPods(ctx, t, cs, "k8s-app=kube-proxy")
	t.Logf("CoreDNS and kube-proxy running %s after up began", time.Since(start).Round(time.Millisecond))

	if out, err := k.script(2*time.Minute, "load-image", helloTar); err != nil {
		t.Fatalf("load-image: %v", err)
	} else {
		t.Logf("kind load image-archive: %s", lastLines(out, 1))
	}
	checkResolves(ctx, t, cs, "kubernetes.default")
	checkAcrossNodes(ctx, t, cs, nodes[0], nodes[1])

	checkSysctlsOf(t, kindSysctls, sysctls, "while the kind cluster runs")
	checkHostPaths(t, existed, "while the kind cluster runs")
	veths := bridgePorts(t, bridge)
	if len(veths) == 0 {
		t.Errorf("bridge %s has no veth: the node is not on the Docker network of hack/kind.sh", bridge)
	}
	shims := k.shimPIDs(t)
	if len(shims) == 0 {
		t.Errorf("no containerd shim found in the Docker daemon's mount namespace")
	}

	start = time.Now()
	out, err := k.script(5*time.Minute, "down")
	downDone = true
	if err != nil {
		t.Fatalf("down: %v", err)
	}
	t.Logf("down in %s:\n%s", time.Since(start).Round(time.Millisecond), lastLines(out, 4))

	for name, pid := range pids {
		if utils.ProcessAlive(pid) && runsBinary(pid, kindComponents[name]) {
			t.Errorf("after down, %s (pid %d) still runs", name, pid)
		}
	}
	for _, pid := range shims {
		if utils.ProcessAlive(pid) && runsBinary(pid, "containerd-shim-runc-v2") {
			t.Errorf("after down, containerd shim (pid %d) still runs", pid)
		}
	}
	checkNoKindLeftovers(t, k.dir, bridge, cgroup, veths)
	checkSysctlsOf(t, kindSysctls, sysctls, "after down")
	checkHostPaths(t, existed, "after down")
}

// kind runs hack/kind.sh in a folder and with a cluster name of the test's own.
type kind struct {
	t      *testing.T
	root   string
	dir    string
	name   string
	binDir string
}

func newKind(t *testing.T) *kind {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := k8sassets.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	return &kind{t: t, root: root, dir: t.TempDir(), name: fmt.Sprintf("lj-test-%d", os.Getpid()), binDir: binDir}
}

// script runs hack/kind.sh with args, killed after timeout; the offline way, whatever
// KIND_NODE_IMAGE the caller has.
func (k *kind) script(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(k.root, "hack", "kind.sh")}, args...)...)
	cmd.Dir = k.root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KIND_NODE_IMAGE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LOCKEDJOB_KIND_DIR="+k.dir, "KIND_CLUSTER_NAME="+k.name, "K8S_BIN_DIR="+k.binDir,
		"KIND_WORKERS="+strconv.Itoa(kindWorkers))
	return utils.Run(cmd)
}

// recordPIDs reads the PIDs hack/kind.sh recorded for its daemon and checks that each runs.
func (k *kind) recordPIDs() map[string]int {
	k.t.Helper()
	pids := map[string]int{}
	for name, bin := range kindComponents {
		pid, err := strconv.Atoi(strings.TrimSpace(readFile(k.t, filepath.Join(k.dir, "pids", name+".pid"))))
		if err != nil {
			k.t.Fatalf("pid of %s: %v", name, err)
		}
		if !utils.ProcessAlive(pid) || !runsBinary(pid, bin) {
			k.t.Fatalf("after up, %s (pid %d) is not running %s", name, pid, bin)
		}
		pids[name] = pid
	}
	return pids
}

// shimPIDs are the containerd shims in the daemon's mount namespace (dockerd's containerd
// starts them; they outlive it by design, so down must end them).
func (k *kind) shimPIDs(t *testing.T) []int {
	t.Helper()
	ns := strings.TrimSpace(readFile(t, filepath.Join(k.dir, "mntns")))
	var pids []int
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if mnt, err := os.Readlink(p + "/ns/mnt"); err != nil || mnt != ns {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err == nil && runsBinary(pid, "containerd-shim-runc-v2") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (k *kind) clientset() kubernetes.Interface {
	k.t.Helper()
	return clientsetOf(k.t, filepath.Join(k.dir, "kubeconfig"))
}

// waitNodesReady polls until the cluster has n nodes and all are Ready; it returns them by name
// (kind's control plane first).
func waitNodesReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, n int) []corev1.Node {
	t.Helper()
	var last string
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil && len(nodes.Items) == n && allNodesReady(nodes.Items) {
			slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
			return nodes.Items
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d nodes", len(nodes.Items))
			for _, n := range nodes.Items {
				last += fmt.Sprintf("; %s conditions %+v", n.Name, n.Status.Conditions)
			}
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			t.Fatalf("not %d Ready nodes before the deadline; last: %s", n, last)
		}
	}
}

func allNodesReady(nodes []corev1.Node) bool {
	for _, n := range nodes {
		if !conditionTrue(n.Status.Conditions, corev1.NodeReady) {
			return false
		}
	}
	return true
}

func conditionTrue(conds []corev1.NodeCondition, want corev1.NodeConditionType) bool {
	for _, c := range conds {
		if c.Type == want {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return "no InternalIP"
}

// waitSystemPods polls until kube-system has pods with the label selector and all are Running
// and Ready.
func waitSystemPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string) {
	t.Helper()
	var last string
	for {
		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) > 0 && allReady(pods.Items) {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d pods", len(pods.Items))
			for _, p := range pods.Items {
				last += fmt.Sprintf("; %s %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			t.Fatalf("kube-system pods %s not all Running and Ready before the deadline; last: %s", selector, last)
		}
	}
}

func allReady(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			return false
		}
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		if !ready {
			return false
		}
	}
	return true
}

// checkResolves runs a pod of the loaded hello image that resolves name through the cluster's
// DNS (CoreDNS behind the kube-dns Service, reached through kube-proxy's rules) and checks that
// the answer is the kubernetes Service's cluster IP.
func checkResolves(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service default/kubernetes: %v", err)
	}
	pod := helloPod("resolve", "", "-once", "-resolve", name)
	created := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p := waitPod(ctx, t, cs, pod.Name, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	logs, err := cs.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", pod.Name, err)
	}
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s: %+v\nlogs:\n%s", pod.Name, p.Status.Phase, p.Status.ContainerStatuses, logs)
	}
	want := fmt.Sprintf("resolved %s: %s", name, svc.Spec.ClusterIP)
	if !strings.Contains(string(logs), want) {
		t.Fatalf("pod %s logs %q, want a line %q", pod.Name, logs, want)
	}
	t.Logf("pod %s: %q, Succeeded %s after create", pod.Name, want, time.Since(created).Round(time.Millisecond))
}

// checkAcrossNodes runs a pod of the hello image on node from that listens, and one on node to that
// dials it at its pod IP: the line must arrive from the dialer's own pod IP, so a pod reaches a pod
// of another node, without NAT, through the routes hack/kind.sh's wire_pods set (kindnetd's work in
// kind's own image). Each pod's IP must be of its node's pod CIDR.
func checkAcrossNodes(ctx context.Context, t *testing.T, cs kubernetes.Interface, from, to corev1.Node) {
	t.Helper()
	listener := helloPod("listen", from.Name, "-once", "-listen", ":7000")
	if _, err := cs.CoreV1().Pods("default").Create(ctx, listener, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", listener.Name, err)
	}
	l := waitPod(ctx, t, cs, listener.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	dialer := helloPod("dial", to.Name, "-once", "-dial", net.JoinHostPort(l.Status.PodIP, "7000"))
	if _, err := cs.CoreV1().Pods("default").Create(ctx, dialer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", dialer.Name, err)
	}
	done := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	}
	d := waitPod(ctx, t, cs, dialer.Name, done)
	l = waitPod(ctx, t, cs, listener.Name, done)
	logs, err := cs.CoreV1().Pods("default").GetLogs(listener.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", listener.Name, err)
	}
	// The listener must see the dialer's own address: pods reach pods without NAT.
	want := regexp.MustCompile(`received from ` + regexp.QuoteMeta(d.Status.PodIP) + `:\d+: hello from a real container on ` + dialer.Name + "\n")
	if l.Status.Phase != corev1.PodSucceeded || d.Status.Phase != corev1.PodSucceeded || !want.Match(logs) {
		t.Fatalf("pod %s on %s (%s) %s, pod %s on %s (%s) %s; listener's logs %q, want a line matching %s",
			dialer.Name, to.Name, d.Status.PodIP, d.Status.Phase, listener.Name, from.Name, l.Status.PodIP, l.Status.Phase, logs, want)
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		node corev1.Node
	}{{l, from}, {d, to}} {
		_, cidr, err := net.ParseCIDR(c.node.Spec.PodCIDR)
		if err != nil || !cidr.Contains(net.ParseIP(c.pod.Status.PodIP)) {
			t.Errorf("pod %s has IP %s, not of node %s's pod CIDR %s", c.pod.Name, c.pod.Status.PodIP, c.node.Name, c.node.Spec.PodCIDR)
		}
	}
	t.Logf("pod %s on %s (%s) reached pod %s on %s (%s): %s", dialer.Name, to.Name, d.Status.PodIP,
		listener.Name, from.Name, l.Status.PodIP, strings.TrimSpace(string(logs)))
}

// helloPod is a pod of the hello image with args, on the named node ("": where the scheduler puts
// it), the control plane's taint tolerated.
func helloPod(name, node string, args ...string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "hello", Image: helloImage, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
}

// checkNoKindLeftovers: no mount under the folder in any process's view, no process whose
// command line names the folder (dockerd, containerd, kind) or that sits in the containers'
// cgroups, no bridge or veth of it, no cgroup, no Docker state.
func checkNoKindLeftovers(t *testing.T, dir, bridge, cgroup string, veths []string) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if line := grepFile(p+"/mountinfo", " "+dir); line != "" {
			t.Errorf("after down, %s still has a mount under %s: %s", p, dir, line)
		}
		if cmdline, err := os.ReadFile(p + "/cmdline"); err == nil && strings.Contains(string(cmdline), dir) {
			t.Errorf("after down, %s still runs: %s", p, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
		if line := grepFile(p+"/cgroup", "/"+cgroup+"/"); line != "" {
			t.Errorf("after down, %s is still in the containers' cgroup: %s", p, line)
		}
	}
	links, err := utils.Run(exec.Command("ip", "-o", "link", "show"))
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	for _, name := range append([]string{bridge}, veths...) {
		if strings.Contains(links, " "+name+":") || strings.Contains(links, " "+name+"@") {
			t.Errorf("after down, link %s still exists", name)
		}
	}
	if roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup); len(roots) > 0 || exists("/sys/fs/cgroup/"+cgroup) {
		t.Errorf("after down, cgroups remain: %v", roots)
	}
	for _, p := range []string{"docker", "containerd", "ns", "docker.sock", "kubeconfig", "mntns", "net-index"} {
		if exists(filepath.Join(dir, p)) {
			t.Errorf("after down, %s is still there", filepath.Join(dir, p))
		}
	}
}

// runsBinary reports whether pid runs a binary named name (so a PID reused by another program
// after down does not count as left over).
func runsBinary(pid int, name string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	return filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == name
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sleepCtx waits d, or less if ctx ends first; false if it did.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
