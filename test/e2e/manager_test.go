//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/lockedjob/lockedjob/test/utils"
)

// managerOpts are the manager flags a scenario chooses.
type managerOpts struct {
	prefix     string   // --key-prefix (also names the release channel)
	redisAddrs []string // one address: --redis-addr; three: --redis-addrs (Redlock)
	// fastFailover shortens leader election (lease 4s) so a successor of a
	// SIGKILLed manager takes over within seconds. Off: the manager's defaults
	// (lease 15s), which a SIGSTOP longer than the renew deadline cannot upset.
	fastFailover bool
}

// manager is one manager process, started from the binary BeforeSuite built.
type manager struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	started time.Time
}

var (
	managersMu sync.Mutex
	managers   []*manager // every manager started, so AfterSuite can make sure none is left
	managerSeq int
)

// startManager starts a manager and waits until it leads and its workers run.
func startManager(o managerOpts) *manager {
	GinkgoHelper()
	managersMu.Lock()
	managerSeq++
	m := &manager{name: fmt.Sprintf("manager-%02d", managerSeq), done: make(chan struct{})}
	managersMu.Unlock()
	m.logPath = filepath.Join(suite.work, m.name+".log")

	args := []string{
		"--kubeconfig", suite.kubeconfig,
		"--namespace", operatorNamespace,
		"--cluster-id", "e2e",
		"--key-prefix", o.prefix,
		"--release-channel", o.prefix + "released",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
		"--leader-elect=true",
		"--wait-backoff-max", "2s",
		// 2 cores shared with a whole control plane: a 50ms Redlock node
		// timeout (the default) would count scheduling hiccups as node failures.
		"--redlock-node-timeout", "250ms",
		"--zap-log-level", "debug",
	}
	if len(o.redisAddrs) == 1 {
		args = append(args, "--redis-addr", o.redisAddrs[0])
	} else {
		args = append(args, "--redis-addrs", strings.Join(o.redisAddrs, ","))
	}
	if o.fastFailover {
		args = append(args,
			"--leader-election-lease-duration", "4s",
			"--leader-election-renew-deadline", "3s",
			"--leader-election-retry-period", "500ms")
	}
	logFile, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = logFile.Close() }()
	_, _ = fmt.Fprintf(logFile, "# %s %s\n", suite.managerBin, strings.Join(args, " "))
	m.cmd = exec.Command(suite.managerBin, args...)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+suite.kubeconfig)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // ^C on `go test` reaches the suite, which stops the manager itself
		Pdeathsig: syscall.SIGKILL, // a crashed test binary takes its manager with it
	}
	Expect(m.cmd.Start()).To(Succeed())
	m.started = time.Now()
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.done)
	}()
	managersMu.Lock()
	managers = append(managers, m)
	managersMu.Unlock()

	Eventually(func(g Gomega) {
		if m.exited() {
			StopTrying(fmt.Sprintf("%s exited: %v\n%s", m.name, m.waitErr, m.logTail(40))).Now()
		}
		b, _ := os.ReadFile(m.logPath)
		g.Expect(string(b)).To(ContainSubstring("Starting workers"), "%s has not started its workers yet", m.name)
	}).WithTimeout(60*time.Second).Should(Succeed(), "manager %s did not come up", m.name)
	logf("%s (pid %d) leads after %s; log %s", m.name, m.cmd.Process.Pid, since(m.started), m.logPath)
	return m
}

func (m *manager) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *manager) pid() int { return m.cmd.Process.Pid }

// Stop sends SIGTERM (and SIGCONT, in case it is paused) and waits; after 15s
// it kills. A graceful stop releases the leader lease, so the next manager
// leads at once.
func (m *manager) Stop() {
	GinkgoHelper()
	if m.exited() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	_ = m.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-m.done:
		logf("%s stopped (%v)", m.name, m.waitErr)
		return
	case <-time.After(15 * time.Second):
	}
	logf("%s ignored SIGTERM for 15s; killing it", m.name)
	m.Kill()
}

// Kill sends SIGKILL, like a crashed node, and waits until the process is gone.
func (m *manager) Kill() {
	GinkgoHelper()
	if m.exited() {
		return
	}
	Expect(m.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	Eventually(m.done).WithTimeout(30*time.Second).Should(BeClosed(), "%s survived SIGKILL", m.name)
	logf("%s killed (SIGKILL)", m.name)
}

// Pause sends SIGSTOP and returns once every thread of the process is stopped.
func (m *manager) Pause() {
	GinkgoHelper()
	Expect(m.cmd.Process.Signal(syscall.SIGSTOP)).To(Succeed())
	Eventually(func() bool { return utils.ProcessStopped(m.pid()) }).WithTimeout(10*time.Second).
		WithPolling(5*time.Millisecond).Should(BeTrue(), "%s not stopped after SIGSTOP", m.name)
}

// Resume sends SIGCONT (nothing if the process is gone).
func (m *manager) Resume() {
	GinkgoHelper()
	if m.exited() {
		return
	}
	Expect(m.cmd.Process.Signal(syscall.SIGCONT)).To(Succeed())
}

func (m *manager) logTail(n int) string { return utils.TailFile(m.logPath, n) }

// logCount counts the lines of the manager's log that contain s.
func (m *manager) logCount(s string) int {
	b, _ := os.ReadFile(m.logPath)
	return strings.Count(string(b), s)
}

// stopAllManagers stops every manager still running and checks none is left.
func stopAllManagers() {
	managersMu.Lock()
	all := append([]*manager(nil), managers...)
	managersMu.Unlock()
	for _, m := range all {
		m.Stop()
	}
	for _, m := range all {
		Expect(m.exited()).To(BeTrue(), "%s (pid %d) still runs", m.name, m.pid())
		Expect(utils.ProcessAlive(m.pid())).To(BeFalse(), "%s (pid %d) still runs", m.name, m.pid())
	}
}
