// Package redisserver runs real redis-server processes for tests, benchmarks
// and e2e suites.
//
// The lock library's guarantees depend on how a real Redis behaves when it
// restarts, stalls or dies, so tests talk to the genuine binary (the Debian
// redis-server package) rather than an in-process fake. Each server listens on
// its own free loopback port with persistence off, so a restart is a clean
// "all keys lost" event, exactly the failure mode Redlock has to survive.
//
// The package is Linux-only: it relies on process groups, Pdeathsig and
// waitid(2) so that no redis-server outlives the test binary.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/testutil/ports"
)

// TB is the part of testing.TB the harness uses. testing.TB itself cannot be implemented outside
// the testing package, and Ginkgo suites pass GinkgoT(), which satisfies this.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

const (
	// readyTimeout is generous because CI machines are often saturated by
	// parallel builds; it only bounds the failure case, a healthy server is
	// polled as soon as it answers.
	readyTimeout = 20 * time.Second
	// pollInterval keeps readiness detection fast without busy-looping.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one readiness probe so a wedged port cannot eat the
	// whole readiness budget in a single attempt.
	probeTimeout = time.Second
	// stopGrace is how long a server may take to honour SIGTERM before it is
	// killed; redis without persistence normally exits in milliseconds.
	stopGrace = 5 * time.Second
	// killWait bounds the wait after SIGKILL, which only a process stuck in
	// the kernel (D state) can outlast; failing beats hanging the test binary.
	killWait = 30 * time.Second
	// startAttempts: a port picked by binding :0 can be grabbed by someone
	// else before redis-server binds it, so a first start retries on a new port.
	startAttempts = 5
	// restartPortTimeout: Restart must keep the address, so instead of
	// switching ports it waits for a transient holder of the port to go away.
	restartPortTimeout = 10 * time.Second
	// logTailLines is enough to show redis' own reason for failing to start.
	logTailLines = 20

	// clientTimeout makes a stalled server fail a command fast, yet leaves
	// headroom for a loaded machine where 1s round trips do happen.
	clientTimeout = 2 * time.Second
)

// errPortInUse marks a start that failed only because the port was taken, the
// one failure worth retrying.
var errPortInUse = errors.New("port already in use")

type config struct {
	args []string
	// sentinel, when set, runs the process as a Redis Sentinel monitoring this master.
	sentinel *sentinelConfig
	// clockShift preloads the clock shift library (WithClockShift).
	clockShift bool
}

type sentinelConfig struct {
	master, addr string
}

// Option adjusts how the redis-server processes are started.
type Option func(*config)

// WithArgs appends extra redis-server command-line arguments, for tests that
// need a non-default server (keyspace notifications, maxmemory policies, ...).
// They come after the package defaults so they override them; do not pass
// --port, --dir or --logfile, which the package owns.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithSentinel runs the process as a Redis Sentinel (redis-server --sentinel) that monitors the
// master at addr under the name master, with a quorum of 1 and short timeouts so a failover takes
// seconds. Sentinel rewrites its config file, so the harness writes one into the server's own
// folder and passes it first, as Sentinel requires.
func WithSentinel(master, addr string) Option {
	return func(c *config) { c.sentinel = &sentinelConfig{master: master, addr: addr} }
}

// Server is one redis-server process owned by a test (or a benchmark, or an
// e2e suite).
//
// All methods are safe for concurrent use, so a test can, for instance, Pause
// the server from one goroutine while others keep issuing commands.
type Server struct {
	cfg     config
	bin     string
	dir     string
	logPath string
	addr    string   // written once by StartProcess, then read-only
	port    int      // written once by StartProcess, then read-only
	env     []string // added to the process's environment; written once by StartProcess
	shift   []byte   // the mapped clock offset of WithClockShift: set by StartProcess, cleared by Close

	// opMu serialises lifecycle operations so that, e.g., a Restart cannot
	// interleave with a Stop and start a second process on the same port.
	opMu sync.Mutex

	// mu guards the fields below and the exited flag of proc. It is
	// never held while waiting, so Running stays cheap during a slow Stop.
	mu     sync.Mutex
	proc   *process
	closed bool
}

// process is one incarnation of the server; Restart replaces it, which keeps
// the reaper of an old process from touching the state of the new one.
type process struct {
	cmd      *exec.Cmd
	pid      int
	logStart int64 // log offset at launch, so errors show only this run's lines

	// exited is set once the process is a zombie and before it is reaped:
	// while it is false the pid, and therefore the process group id, cannot
	// have been recycled, which makes signalling the group safe.
	exited bool // guarded by Server.mu

	done    chan struct{} // closed after the process has been reaped
	waitErr error         // valid once done is closed
}

// StartProcess starts a redis-server without a testing.TB, for Ginkgo
// BeforeSuite hooks, TestMain and tools whose lifetime is not one test. The
// caller owns the server and must Close it.
func StartProcess(opts ...Option) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redisserver: redis-server is not on PATH (%v): "+
			"tests need a real Redis, install it with `sudo apt-get install -y redis-server` (or `make redis`)", err)
	}
	// Resolve once so that a later Restart does not depend on PATH, which a
	// test may have changed in between.
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log")}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.cfg.clockShift {
		if s.env, err = s.setUpClockShift(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redisserver: %w", err)
		}
	}

	var errs []error
	for range startAttempts {
		port, err := ports.Free() // released before redis-server binds it: launch reports errPortInUse
		if err != nil {
			errs = append(errs, err)
			break
		}
		p, err := s.launch(port)
		if err == nil {
			s.port = port
			s.addr = ports.Addr(port)
			s.setProc(p)
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	_ = s.unmapClockShift()
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redisserver: starting redis-server: %w", errors.Join(errs...))
}

// Start starts one redis-server on a free 127.0.0.1 port with persistence
// off, waits until it answers, and stops it when the test ends, even if the
// test fails or panics half-way. A missing redis-server is a hard failure,
// not a skip: silently skipping would let the lock tests "pass" on a machine
// that never ran them.
func Start(tb TB, opts ...Option) *Server {
	tb.Helper()
	s, err := StartProcess(opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	s.registerCleanup(tb)
	return s
}

// StartN starts n independent servers, as Redlock tests need a quorum of
// unrelated nodes. They start concurrently because start-up latency, not CPU,
// dominates on a loaded machine.
func StartN(tb TB, n int, opts ...Option) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = StartProcess(opts...) })
	}
	wg.Wait()
	// Register cleanups before failing so the servers that did start are
	// still stopped.
	for _, s := range servers {
		if s != nil {
			s.registerCleanup(tb)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("%v", err)
	}
	return servers
}

func (s *Server) registerCleanup(tb TB) {
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("redisserver: %v", err)
		}
	})
}

// Addr returns "127.0.0.1:PORT". It stays the same across Restart so clients
// created before a restart reconnect to the new process, as they would to a
// real Redis that came back.
func (s *Server) Addr() string { return s.addr }

// Client returns a go-redis client for this server, closed when the test ends.
//
// MaxRetries is -1 (no retries): tests of failure handling (Pause, Kill,
// Restart) need to see each error exactly once and promptly, instead of having
// go-redis hide it behind retries with backoff. ContextTimeoutEnabled makes
// context deadlines bound every command, and the short dial/read/write
// timeouts make a stalled server fail fast even without one, while leaving
// headroom for a heavily loaded machine.
func (s *Server) Client(tb TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           clientTimeout,
		ReadTimeout:           clientTimeout,
		WriteTimeout:          clientTimeout,
		MaxRetries:            -1,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5s) and waits until
// it has exited, so a test can assert behaviour while Redis is down. Stopping
// a stopped server is a no-op, and Restart brings it back on the same address.
func (s *Server) Stop(tb TB) {
	tb.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.stopLocked(true); err != nil {
		tb.Fatalf("redisserver: %v", err)
	}
}

// Kill SIGKILLs the server and waits until it has exited, simulating a crash:
// unlike Stop, Redis gets no chance to close client connections cleanly.
func (s *Server) Kill(tb TB) {
	tb.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.stopLocked(false); err != nil {
		tb.Fatalf("redisserver: %v", err)
	}
}

// Restart stops the server if it is running and starts a fresh process on the
// same port, waiting until it answers. Persistence is off, so every key is
// lost: this is the "node restarted and forgot its locks" scenario.
func (s *Server) Restart(tb TB) {
	tb.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.restartLocked(); err != nil {
		tb.Fatalf("redisserver: %v", err)
	}
}

// Pause SIGSTOPs the server. The kernel still completes TCP handshakes on its
// listening socket, so clients connect and send but never get a reply: the
// "slow or partitioned node" case that only timeouts can detect. Pause returns
// once the process is actually stopped, so the next command is guaranteed to
// hang.
func (s *Server) Pause(tb TB) {
	tb.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.pauseLocked(); err != nil {
		tb.Fatalf("redisserver: %v", err)
	}
}

// Resume SIGCONTs a paused server; requests queued meanwhile are then served.
// Resuming a server that is not paused is a no-op.
func (s *Server) Resume(tb TB) {
	tb.Helper()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p := s.currentProc()
	if p == nil {
		return
	}
	if err := s.signal(p, syscall.SIGCONT); err != nil {
		tb.Fatalf("redisserver: resume: %v", err)
	}
}

// Running reports whether the server process is alive. A paused server is
// running: it exists and holds its port, it just does not answer.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited
}

// Close stops the server and removes its temporary directory. It is the
// counterpart of StartProcess for callers without a testing.TB (Ginkgo
// AfterSuite, TestMain); calling it again is a no-op. A closed server cannot
// be restarted.
func (s *Server) Close() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	stopErr := s.stopLocked(true)
	return errors.Join(stopErr, s.unmapClockShift(), os.RemoveAll(s.dir))
}

func (s *Server) currentProc() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

func (s *Server) setProc(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc = p
}

// stopLocked requires opMu. graceful selects SIGTERM with a SIGKILL fallback
// over an immediate SIGKILL.
func (s *Server) stopLocked(graceful bool) error {
	p := s.currentProc()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	if graceful {
		// A stopped process keeps SIGTERM pending until it is continued, so
		// always follow it with SIGCONT; that is harmless if not paused.
		err := errors.Join(s.signal(p, syscall.SIGTERM), s.signal(p, syscall.SIGCONT))
		if err != nil {
			return fmt.Errorf("stop pid %d: %w", p.pid, err)
		}
		timer := time.NewTimer(stopGrace)
		defer timer.Stop()
		select {
		case <-p.done:
			return nil
		case <-timer.C:
		}
	}
	// SIGKILL works on stopped processes too, no SIGCONT needed.
	if err := s.signal(p, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill pid %d: %w", p.pid, err)
	}
	timer := time.NewTimer(killWait)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("redis-server pid %d did not exit %v after SIGKILL", p.pid, killWait)
	}
}

func (s *Server) restartLocked() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("restart: server is closed")
	}
	if err := s.stopLocked(true); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	deadline := time.Now().Add(restartPortTimeout)
	for {
		p, err := s.launch(s.port)
		if err == nil {
			s.setProc(p)
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return fmt.Errorf("restart on %s: %w", s.addr, err)
		}
		time.Sleep(5 * pollInterval)
	}
}

func (s *Server) pauseLocked() error {
	p := s.currentProc()
	s.mu.Lock()
	running := p != nil && !p.exited
	s.mu.Unlock()
	if !running {
		return errors.New("pause: server is not running")
	}
	if err := s.signal(p, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	// kill(2) only queues SIGSTOP; wait for every thread to stop so the
	// caller's next command cannot slip in before the freeze.
	deadline := time.Now().Add(readyTimeout)
	for !allThreadsStopped(p.pid) {
		select {
		case <-p.done:
			return fmt.Errorf("pause: redis-server pid %d exited", p.pid)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause: redis-server pid %d not stopped after %v", p.pid, readyTimeout)
		}
		time.Sleep(pollInterval)
	}
	return nil
}

// signal sends sig to the server's whole process group, so children forked
// for BGSAVE or replication are covered as well. It is a no-op once the
// leader has exited: after that the group id may in principle be recycled.
func (s *Server) signal(p *process, sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// launch starts redis-server on port and waits until that very process
// answers. On failure the process is gone and the error carries the log tail.
func (s *Server) launch(port int) (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own copy of the descriptor
	st, err := logf.Stat()
	if err != nil {
		return nil, err
	}

	var args []string
	if sc := s.cfg.sentinel; sc != nil {
		host, mport, err := net.SplitHostPort(sc.addr)
		if err != nil {
			return nil, fmt.Errorf("sentinel master address: %w", err)
		}
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\n", sc.master, host, mport)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		args = []string{conf, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", s.logPath,
	)
	if s.cfg.sentinel == nil {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, s.cfg.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// Config errors are printed before --logfile takes effect; appending them
	// to the same file keeps one place to look.
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: signals reach forked children too, and a ^C
		// aimed at `go test` is handled by the test binary's cleanups.
		Setpgid: true,
		// A test binary that crashes or is SIGKILLed cannot run cleanups;
		// the kernel then kills the server. Caveat: Linux ties this to the
		// OS thread that forked, which the Go runtime only retires when a
		// goroutine exits while locked with runtime.LockOSThread.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, logStart: st.Size(), done: make(chan struct{})}
	go s.reap(p)

	if err := s.waitReady(p, port); err != nil {
		// Never leave a half-started server behind.
		_ = s.signal(p, syscall.SIGKILL)
		<-p.done
		return nil, err
	}
	return p, nil
}

// reap waits for the process in two steps so that signal never targets a
// recycled pid: first block until it is a zombie without reaping it, mark it
// exited under the lock, and only then let Wait release the pid.
func (s *Server) reap(p *process) {
	waitExitedNoReap(p.pid)
	s.mu.Lock()
	// The zombie leader still pins the group id: clean up any orphaned
	// children (e.g. a BGSAVE fork) while that is safe.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.exited = true
	s.mu.Unlock()
	p.waitErr = p.cmd.Wait()
	close(p.done)
}

// waitExitedNoReap blocks until pid has exited, leaving it waitable.
func waitExitedNoReap(pid int) {
	const pPID = 1         // P_PID from <sys/wait.h>; not exported by package syscall
	var siginfo [16]uint64 // siginfo_t is 128 bytes
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&siginfo[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			// On any other error Wait below still reaps; we merely lose the
			// pre-reap window.
			return
		}
	}
}

func (s *Server) waitReady(p *process, port int) error {
	addr := ports.Addr(port)
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			return s.exitError(p)
		default:
		}
		if lastErr = probe(addr, p.pid); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server pid %d not answering on %s after %v (last probe: %v)%s",
				p.pid, addr, readyTimeout, lastErr, s.logTail(p))
		}
		timer := time.NewTimer(pollInterval)
		select {
		case <-p.done:
			timer.Stop()
			return s.exitError(p)
		case <-timer.C:
		}
	}
}

func (s *Server) exitError(p *process) error {
	tail := s.logTail(p)
	err := fmt.Errorf("redis-server pid %d exited before answering (%v)%s", p.pid, p.waitErr, tail)
	if strings.Contains(tail, "Address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

// logTail returns the last lines this run wrote to the log, formatted for
// appending to an error message.
func (s *Server) logTail(p *process) string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("\n(no log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.NewSectionReader(f, p.logStart, 1<<30))
	if err != nil {
		return fmt.Sprintf("\n(reading log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("\nlog %s (tail):\n  %s", s.logPath, strings.Join(lines, "\n  "))
}

// probe checks that the process answering on addr is pid, speaking raw RESP
// to stay clear of client pooling and backoff. Checking the pid matters: if
// another server grabbed the port first, a plain PING would succeed against
// the wrong process just before ours dies with "Address already in use".
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	header, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	header = strings.TrimRight(header, "\r\n")
	if !strings.HasPrefix(header, "$") {
		return fmt.Errorf("unexpected reply %q", header) // e.g. -LOADING
	}
	n, err := strconv.Atoi(header[1:])
	if err != nil || n < 0 {
		return fmt.Errorf("unexpected reply %q", header)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	for line := range bytes.Lines(body) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("process_id:")); ok {
			if string(v) == strconv.Itoa(pid) {
				return nil
			}
			return fmt.Errorf("%s is served by pid %s, not %d", addr, v, pid)
		}
	}
	return errors.New("INFO reply has no process_id")
}

// allThreadsStopped reports whether every thread of pid is in state T
// (stopped); redis runs background threads besides the event loop.
func allThreadsStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name, which may itself
		// contain spaces or parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
