package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	realNodeName  = "lockedjob-real-1"
	realNodeLabel = "lockedjob.dev/real-node"
	helloImage    = "lockedjob.local/realnode-hello:test"
)

var realNodeComponents = []string{"nodens", "containerd", "kubelet"}

// hostPaths are folders containerd, kubelet and the CNI plugins create at fixed places unless the
// node's mount namespace hides them; none may appear on the host.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/lib/cni", "/etc/cni/net.d", "/opt/containerd",
	"/run/containerd", "/run/netns", "/var/log/containers", "/var/log/pods",
}

// TestRealNode brings up a cluster with a real node (kubelet, containerd, runc) in its own folder
// and ports, runs a real container there (its log line through `kubectl logs`, a command through
// `kubectl exec`), checks that pods without the toleration never land there, kills containerd to
// leave a crashed node behind, and checks that down leaves no process, mount, bridge, veth,
// cgroup or host path.
func TestRealNode(t *testing.T) {
	if os.Getenv("LOCKEDJOB_REAL_NODE") == "0" {
		t.Skip("LOCKEDJOB_REAL_NODE=0: real node explicitly off")
	}
	if os.Geteuid() != 0 {
		t.Fatal("a real node needs root (containerd, runc, a bridge); run as root, or set LOCKEDJOB_REAL_NODE=0 to skip this test")
	}
	c := newCluster(t)
	c.Env = []string{"LOCKEDJOB_REAL_NODE=1", "LOCKEDJOB_CLUSTER_NODES=1"}
	bridge := utils.RealNodeBridge(c.PortBase)
	cgroup := "lockedjob-" + strconv.Itoa(c.PortBase)
	existed := map[string]bool{}
	for _, p := range append(hostPaths, "/run/"+cgroup) {
		existed[p] = exists(p)
	}
	sysctls := readSysctls(t)
	helloTar := buildHelloImage(t, c.Root)

	downDone := false
	t.Cleanup(func() {
		if !downDone {
			if out, err := c.Script(2*time.Minute, "down"); err != nil {
				t.Errorf("cleanup down: %v\n%s", err, out)
			}
		}
	})
	start := time.Now()
	out := c.script(5*time.Minute, "up")
	t.Logf("cluster with a real node up in %s (ports %d..%d, dir %s)", time.Since(start).Round(time.Millisecond),
		c.PortBase, c.PortBase+utils.PortBlock-1, c.Dir)
	if !strings.Contains(out, "real node "+realNodeName+" Ready") {
		t.Fatalf("up did not report the real node Ready:\n%s", out)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "after kubelet start") {
			t.Log(strings.TrimSpace(line))
		}
	}
	c.recordPIDs()
	c.recordRealNodePIDs()
	if again := c.script(time.Minute, "up"); !strings.Contains(again, "already up") {
		t.Errorf("second up did not find the cluster with its real node already up:\n%s", again)
	}
	c.script(time.Minute, "load-image", helloTar)

	cs := c.clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checkRealNodeObject(ctx, t, cs)

	// A real container: its own output through kubectl logs, a command through kubectl exec.
	hello := realPod("real-hello", true)
	created := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, hello, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	running := waitPod(ctx, t, cs, hello.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	t.Logf("pod %s create -> Running in %s on %s (IP %s)", hello.Name, time.Since(created).Round(time.Millisecond),
		running.Spec.NodeName, running.Status.PodIP)
	if running.Spec.NodeName != realNodeName {
		t.Fatalf("pod %s runs on %q, want %s", hello.Name, running.Spec.NodeName, realNodeName)
	}
	want := "hello from a real container on " + hello.Name
	logs := pollOutput(ctx, t, want, func() (string, error) {
		b, err := cs.CoreV1().Pods("default").GetLogs(hello.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return string(b), err
	})
	t.Logf("kubectl logs %s: %s", hello.Name, strings.TrimSpace(logs))
	execOut, err := c.kubectl(30*time.Second, "exec", hello.Name, "--", "/hello", "-once")
	if err != nil || !strings.Contains(execOut, want) {
		t.Fatalf("kubectl exec: err %v, output %q, want %q", err, execOut, want)
	}
	nodeIP := strings.TrimSpace(c.script(10*time.Second, "node-ip"))
	_, subnet, err := net.ParseCIDR(nodeIP + "/24")
	if err != nil || !subnet.Contains(net.ParseIP(running.Status.PodIP)) || running.Status.HostIP != nodeIP {
		t.Errorf("node-ip printed %q; pod IP %s, host IP %s: want both in the node's /24, host IP = node IP",
			nodeIP, running.Status.PodIP, running.Status.HostIP)
	}
	checkPodReachesHost(t, c, hello.Name, nodeIP, want)
	veths := bridgePorts(t, bridge)
	if len(veths) == 0 {
		t.Fatalf("no veth on bridge %s while pod %s runs", bridge, hello.Name)
	}
	checkHostPaths(t, existed, "while the real node runs")
	checkSysctls(t, sysctls, "while the real node runs")

	// Without the toleration a pod never lands there: a plain pod goes to a kwok node, one that
	// asks for the real node stays unschedulable because of the taint.
	plain := realPod("plain", false)
	plain.Spec.NodeSelector = nil
	asks := realPod("asks-without-toleration", false)
	for _, p := range []*corev1.Pod{plain, asks} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	got := waitPod(ctx, t, cs, plain.Name, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if got.Spec.NodeName == realNodeName {
		t.Errorf("pod %s without the toleration was scheduled to the real node", plain.Name)
	}
	unsched := waitPod(ctx, t, cs, asks.Name, func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return p.Spec.NodeName != ""
	})
	if unsched.Spec.NodeName != "" {
		t.Errorf("pod %s without the toleration was scheduled to %s", asks.Name, unsched.Spec.NodeName)
	} else {
		t.Logf("pod %s stays unschedulable: %s", asks.Name, scheduledMessage(unsched))
	}

	// Deleting a pod sends its container SIGTERM: hello exits on it at once, so the pod is gone
	// long before the grace period would end in SIGKILL.
	term := realPod("real-term", true)
	const grace = 30
	g := int64(grace)
	term.Spec.TerminationGracePeriodSeconds = &g
	if _, err := cs.CoreV1().Pods("default").Create(ctx, term, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", term.Name, err)
	}
	waitPod(ctx, t, cs, term.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	deleted := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, term.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", term.Name, err)
	}
	waitGone(ctx, t, cs, term.Name)
	if took := time.Since(deleted); took > (grace-5)*time.Second {
		t.Errorf("pod %s took %s to go (grace %ds): its container did not stop on SIGTERM", term.Name, took, grace)
	} else {
		t.Logf("pod %s deleted in %s (grace %ds): the container stopped on SIGTERM", term.Name, took.Round(time.Millisecond), grace)
	}

	// A crash: containerd dies with its containers running; down must still clean up all.
	if err := syscall.Kill(c.started["containerd"], syscall.SIGKILL); err != nil {
		t.Fatalf("kill containerd: %v", err)
	}
	downDone = true
	if out, err := c.Script(2*time.Minute, "down"); err != nil {
		t.Fatalf("down after containerd was killed: %v\n%s", err, out)
	}
	for name, pid := range c.started {
		if utils.ProcessAlive(pid) && !c.recycled(name, pid) {
			t.Errorf("after down, %s (pid %d) is still running", name, pid)
		}
	}
	checkNoLeftovers(t, c.Dir, bridge, cgroup, veths)
	checkHostPaths(t, existed, "after down")
	checkSysctls(t, sysctls, "after down")
	if out, err := c.Script(time.Minute, "down"); err != nil {
		t.Errorf("second down failed: %v\n%s", err, out)
	}
}

// checkPodReachesHost: a process in the pod sends its line to a listener on the node's IP, as a
// workload reaches a Redis server on the host.
func checkPodReachesHost(t *testing.T, c *cluster, pod, nodeIP, want string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node IP: %v", err)
	}
	defer func() { _ = ln.Close() }()
	got := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			line += " (read: " + err.Error() + ")"
		}
		got <- line
	}()
	out, err := c.kubectl(30*time.Second, "exec", pod, "--", "/hello", "-once", "-dial", ln.Addr().String())
	if err != nil {
		t.Fatalf("kubectl exec %s -- /hello -dial %s: %v\n%s", pod, ln.Addr(), err, out)
	}
	select {
	case line := <-got:
		if !strings.Contains(line, want) {
			t.Errorf("the host's listener got %q, want %q", line, want)
		}
	case <-time.After(30 * time.Second):
		t.Error("the host's listener got nothing from the pod in 30s")
	}
}

// buildHelloImage writes testdata/hello as an image tarball with the project's imgtool.
func buildHelloImage(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := utils.Run(build); err != nil {
		t.Fatalf("build testdata/hello: %v\n%s", err, out)
	}
	if out, err := utils.Run(exec.Command("make", "-s", "-C", root, "imgtool")); err != nil {
		t.Fatalf("make imgtool: %v\n%s", err, out)
	}
	tar := filepath.Join(dir, "hello.tar")
	imgtool := exec.Command(filepath.Join(root, "bin", "imgtool"), "-tag", helloImage, "-out", tar,
		"-entrypoint", `["/hello"]`, "-user", "65532:65532", "file:"+bin+":/hello:0755")
	if out, err := utils.Run(imgtool); err != nil {
		t.Fatalf("imgtool: %v\n%s", err, out)
	}
	return tar
}

func (c *cluster) clientset() kubernetes.Interface {
	c.t.Helper()
	return clientsetOf(c.t, filepath.Join(c.Dir, "kubeconfig"))
}

// clientsetOf is a client of the cluster of the kubeconfig file at path.
func clientsetOf(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (c *cluster) kubectl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args = append([]string{"--kubeconfig", filepath.Join(c.Dir, "kubeconfig")}, args...)
	return utils.Run(exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), args...))
}

// recordRealNodePIDs adds the real node's processes to those down must stop. Their binaries are
// not in BinDir, so they are checked by the binary recorded next to the pid file.
func (c *cluster) recordRealNodePIDs() {
	c.t.Helper()
	for _, name := range realNodeComponents {
		pid, err := c.PID(name)
		if err != nil {
			c.t.Fatalf("after up: %v", err)
		}
		if !utils.ProcessAlive(pid) {
			c.t.Fatalf("after up, %s (pid %d) is not running", name, pid)
		}
		c.started[name] = pid
	}
}

// recycled reports whether pid now belongs to another program than the component started under
// it (a PID reused after down); only then may a live pid pass the after-down check.
func (c *cluster) recycled(name string, pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	switch name {
	case "nodens":
		return filepath.Base(exe) != "sleep"
	case "containerd", "kubelet":
		return filepath.Base(exe) != name
	default:
		return !c.alive(name, pid)
	}
}

func checkRealNodeObject(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, realNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", realNodeName, err)
	}
	if n.Labels[realNodeLabel] != "true" {
		t.Errorf("node %s labels %v, want %s=true", realNodeName, n.Labels, realNodeLabel)
	}
	tainted := false
	for _, taint := range n.Spec.Taints {
		if taint.Key == realNodeLabel && taint.Value == "true" && taint.Effect == corev1.TaintEffectNoSchedule {
			tainted = true
		}
	}
	if !tainted {
		t.Errorf("node %s taints %v, want %s=true:NoSchedule", realNodeName, n.Spec.Taints, realNodeLabel)
	}
}

// realPod is a pod of the hello image that selects the real node, tolerating its taint if asked.
func realPod(name string, tolerate bool) *corev1.Pod {
	grace := int64(5)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{realNodeLabel: "true"},
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "hello", Image: helloImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if tolerate {
		p.Spec.Tolerations = []corev1.Toleration{{
			Key: realNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
		}}
	}
	return p
}

// waitPod polls the pod until done says so; it fails when ctx expires.
func waitPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last *corev1.Pod
	var lastErr error
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && done(p) {
			return p
		}
		if err == nil {
			last = p
		}
		lastErr = err
		select {
		case <-ctx.Done():
			status := any(nil)
			if last != nil {
				status = last.Status
			}
			t.Fatalf("pod %s: condition not met before the deadline; last error %v; last status %+v", name, lastErr, status)
		case <-tick.C:
		}
	}
}

// waitGone polls until the pod no longer exists; it fails when ctx expires.
func waitGone(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s still exists at the deadline (last error %v)", name, err)
		case <-tick.C:
		}
	}
}

// pollOutput calls get until its output contains want; it fails when ctx expires.
func pollOutput(ctx context.Context, t *testing.T, want string, get func() (string, error)) string {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := get()
		if err == nil && strings.Contains(out, want) {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("output never contained %q; last output %q, error %v", want, out, err)
		case <-tick.C:
		}
	}
}

func scheduledMessage(p *corev1.Pod) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			return cond.Message
		}
	}
	return ""
}

// bridgePorts lists the interfaces attached to bridge (the pods' host-side veths).
func bridgePorts(t *testing.T, bridge string) []string {
	t.Helper()
	out, err := utils.Run(exec.Command("ip", "-o", "link", "show", "master", bridge))
	if err != nil {
		t.Fatalf("ip link show master %s: %v\n%s", bridge, err, out)
	}
	var ports []string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			ports = append(ports, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	return ports
}

// checkNoLeftovers: no mount under the cluster folder in any process's view, no bridge or veth of
// the node, no cgroup under its cgroup root, no containerd shim of its socket.
func checkNoLeftovers(t *testing.T, dir, bridge, cgroup string, veths []string) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, mi := range procs {
		if line := grepFile(mi, " "+dir); line != "" {
			t.Errorf("after down, %s still has a mount under %s: %s", mi, dir, line)
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(mi), "cmdline"))
		if strings.Contains(string(cmdline), "containerd-shim") &&
			strings.Contains(string(cmdline), "/run/"+cgroup+"/containerd.sock") {
			t.Errorf("after down, a containerd shim of the node still runs: %s", filepath.Dir(mi))
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
	roots, err := filepath.Glob("/sys/fs/cgroup/*/" + cgroup)
	if err != nil {
		t.Fatal(err)
	}
	if exists("/sys/fs/cgroup/" + cgroup) {
		roots = append(roots, "/sys/fs/cgroup/"+cgroup)
	}
	if len(roots) > 0 {
		t.Errorf("after down, cgroups remain: %v", roots)
	}
}

func checkHostPaths(t *testing.T, existed map[string]bool, when string) {
	t.Helper()
	for p, before := range existed {
		if !before && exists(p) {
			t.Errorf("%s, %s exists on the host (it did not before the real node)", when, p)
		}
	}
}

// watchedSysctls are the host settings kubelet and the CNI bridge plugin would change unless
// told not to (protectKernelDefaults with faked files, isGateway false).
var watchedSysctls = []string{
	"/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/panic", "/proc/sys/kernel/panic_on_oops",
	"/proc/sys/net/ipv4/ip_forward",
}

func readSysctls(t *testing.T) map[string]string {
	t.Helper()
	return readSysctlsOf(t, watchedSysctls)
}

// readSysctlsOf reads the settings at paths (files under /proc/sys).
func readSysctlsOf(t *testing.T, paths []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		m[p] = strings.TrimSpace(string(b))
	}
	return m
}

func checkSysctls(t *testing.T, before map[string]string, when string) {
	t.Helper()
	checkSysctlsOf(t, watchedSysctls, before, when)
}

// checkSysctlsOf fails for every setting at paths that is not what before recorded.
func checkSysctlsOf(t *testing.T, paths []string, before map[string]string, when string) {
	t.Helper()
	for p, v := range readSysctlsOf(t, paths) {
		if v != before[p] {
			t.Errorf("%s, %s is %s on the host, was %s", when, p, v, before[p])
		}
	}
}

// grepFile returns the first line of path containing s, or "" (also when it cannot be read: a
// process that exited has no mounts left).
func grepFile(path, s string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return sc.Text()
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
