//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/lockedjob/lockedjob/test/testkit"
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

// managers starts every manager process of the suite, named manager-01, manager-02, ... across
// scenarios, so AfterSuite can make sure none is left. BeforeSuite sets its binary and folder.
var managers = &testkit.Launcher{Name: "manager"}

// manager is one manager process. Its Stop, Kill, Pause and Resume assert, so a spec reads as its
// steps.
type manager struct{ *testkit.Process }

// startManager starts a manager and waits until it leads and its workers run.
func startManager(o managerOpts) *manager {
	GinkgoHelper()
	f := testkit.Flags{
		Kubeconfig:     suite.kubeconfig,
		Namespace:      operatorNamespace,
		ClusterID:      "e2e",
		KeyPrefix:      o.prefix,
		WaitBackoffMax: 2 * time.Second,
		// 2 cores shared with a whole control plane: a 50ms Redlock node
		// timeout (the default) would count scheduling hiccups as node failures.
		RedlockNodeTimeout: 250 * time.Millisecond,
		Redis:              testkit.RedisAddrs(o.redisAddrs...),
	}
	if o.fastFailover {
		f.LeaderElection = testkit.FastFailover
	}
	p, err := managers.Start(f)
	Expect(err).NotTo(HaveOccurred())
	m := &manager{p}
	Expect(m.WaitReady(60*time.Second)).To(Succeed(), "manager %s did not come up", m.Name)
	logf("%s (pid %d) leads after %s; log %s", m.Name, m.PID(), since(m.Started), m.LogPath)
	return m
}

// Stop stops the manager gracefully (SIGTERM), or kills it after testkit.StopGrace.
func (m *manager) Stop() {
	GinkgoHelper()
	if m.Exited() {
		return
	}
	forced, err := m.Process.Stop()
	if forced {
		logf("%s ignored SIGTERM for %s; killing it", m.Name, testkit.StopGrace)
		Expect(err).NotTo(HaveOccurred())
		logf("%s killed (SIGKILL)", m.Name)
		return
	}
	logf("%s stopped (%v)", m.Name, m.Err())
}

// Kill sends SIGKILL, like a crashed node, and waits until the process is gone.
func (m *manager) Kill() {
	GinkgoHelper()
	if m.Exited() {
		return
	}
	Expect(m.Process.Kill()).To(Succeed())
	logf("%s killed (SIGKILL)", m.Name)
}

// Pause sends SIGSTOP and returns once every thread of the process is stopped.
func (m *manager) Pause() {
	GinkgoHelper()
	Expect(m.Process.Pause()).To(Succeed())
}

// Resume sends SIGCONT (nothing if the process is gone).
func (m *manager) Resume() {
	GinkgoHelper()
	Expect(m.Process.Resume()).To(Succeed())
}

// stopAllManagers stops every manager still running and checks none is left.
func stopAllManagers() {
	all := managers.Processes()
	for _, p := range all {
		(&manager{p}).Stop()
	}
	for _, p := range all {
		Expect(p.Exited()).To(BeTrue(), "%s (pid %d) still runs", p.Name, p.PID())
		Expect(utils.ProcessAlive(p.PID())).To(BeFalse(), "%s (pid %d) still runs", p.Name, p.PID())
	}
}
