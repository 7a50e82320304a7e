package redisserver

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdTimeout is generous because the tests may share the machine with heavy
// builds; only the Pause test relies on a deadline actually expiring.
const cmdTimeout = 10 * time.Second

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	t.Cleanup(cancel)
	return c
}

func pidOf(t *testing.T, s *Server) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatal("server has no process")
	}
	return s.proc.pid
}

// assertGone checks that pid no longer exists at all, not even as a zombie:
// Stop must reap what it started.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) = %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Fatalf("/proc/%d still exists (stat err %v)", pid, err)
	}
}

func TestSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", s.Addr())
	}
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := c.Get(ctx(t), "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\"", got, err)
	}
	// Persistence must be off, otherwise Restart would not lose data.
	cfg, err := c.ConfigGet(ctx(t), "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty", cfg, err)
	}
}

func TestRestartLosesDataKeepsAddr(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	addr, oldPID := s.Addr(), pidOf(t, s)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Restart(t)

	if s.Addr() != addr {
		t.Fatalf("Addr() after Restart = %q, want %q", s.Addr(), addr)
	}
	if pidOf(t, s) == oldPID {
		t.Fatal("Restart kept the same process")
	}
	assertGone(t, oldPID)
	// The pre-restart client must keep working: its pooled connection is
	// dead, and go-redis should notice before using it.
	if _, err := c.Get(ctx(t), "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Pause(t)
	if !s.Running() {
		t.Fatal("Running() = false while paused")
	}
	if err := syscall.Kill(pidOf(t, s), 0); err != nil {
		t.Fatalf("paused process is gone: %v", err)
	}
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Get(short, "k").Err()
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	if !timedOut {
		t.Fatalf("GET on paused server: err = %v, want a timeout", err)
	}
	// Ending after the client's own ReadTimeout would mean the context
	// deadline was ignored.
	if d := time.Since(start); d >= clientTimeout {
		t.Fatalf("GET on paused server took %v, the 200ms deadline was not honoured", d)
	}

	s.Resume(t)
	got, err := c.Get(ctx(t), "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v; want \"v\"", got, err)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	t.Parallel()
	s := Start(t)
	pid := pidOf(t, s)
	s.Stop(t)
	if s.Running() {
		t.Fatal("Running() = true after Stop")
	}
	assertGone(t, pid)
	s.Stop(t) // idempotent

	// A stopped server can come back on the same address.
	addr := s.Addr()
	s.Restart(t)
	if s.Addr() != addr || !s.Running() {
		t.Fatalf("after Restart: Addr %q (want %q), Running %v", s.Addr(), addr, s.Running())
	}
	if err := s.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Stop+Restart: %v", err)
	}
}

func TestKillPausedServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	pid := pidOf(t, s)
	s.Pause(t)
	s.Kill(t)
	if s.Running() {
		t.Fatal("Running() = true after Kill")
	}
	assertGone(t, pid)
}

func TestCleanupStopsPausedServer(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("owner", func(t *testing.T) {
		s := Start(t)
		pid = pidOf(t, s)
		s.Pause(t) // a stopped process ignores SIGTERM until continued
	})
	assertGone(t, pid)
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3)
	if len(servers) != 3 {
		t.Fatalf("StartN(3) returned %d servers", len(servers))
	}
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("duplicate address %s", s.Addr())
		}
		seen[s.Addr()] = true
		// Write a distinct value to each so that sharing one process would show.
		if err := s.Client(t).Set(ctx(t), "node", i, 0).Err(); err != nil {
			t.Fatalf("SET on %s: %v", s.Addr(), err)
		}
	}
	for i, s := range servers {
		got, err := s.Client(t).Get(ctx(t), "node").Int()
		if err != nil || got != i {
			t.Fatalf("GET node on %s = %d, %v; want %d", s.Addr(), got, err, i)
		}
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--notify-keyspace-events", "Kgx"))
	cfg, err := s.Client(t).ConfigGet(ctx(t), "notify-keyspace-events").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	// Redis normalises the flag order, so compare as a set.
	if got := cfg["notify-keyspace-events"]; len(got) != 3 || strings.Trim("Kgx", got) != "" {
		t.Fatalf("notify-keyspace-events = %q, want the flags Kgx", got)
	}
}

func TestStartProcessClose(t *testing.T) {
	t.Parallel()
	s, err := StartProcess()
	if err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertGone(t, pid)
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s not removed (stat err %v)", s.dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.restartLocked(); err == nil {
		t.Fatal("restarting a closed server succeeded")
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := Start(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				_ = s.Running()
				_ = s.Addr()
			}
		})
	}
	s.Restart(t)
	s.Pause(t)
	s.Resume(t)
	wg.Wait()
	if !s.Running() {
		t.Fatal("server not running after concurrent use")
	}
}

func TestRestartWaitsForPort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Stop(t)
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupying %s: %v", s.Addr(), err)
	}
	defer func() { _ = l.Close() }()
	errc := make(chan error, 1)
	go func() {
		s.opMu.Lock()
		defer s.opMu.Unlock()
		errc <- s.restartLocked()
	}()
	// Free the port only once redis has lost the race at least once, so the
	// retry path is what brings the server back.
	deadline := time.Now().Add(cmdTimeout)
	for {
		b, _ := os.ReadFile(s.logPath)
		if strings.Contains(string(b), "Address already in use") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server never reported the occupied port")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = l.Close()
	if err := <-errc; err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := s.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
}

func TestProbeRejectsForeignServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	// Another test's server on "our" port must not count as ready.
	if err := probe(s.Addr(), pidOf(t, s)+1); err == nil || !strings.Contains(err.Error(), "served by pid") {
		t.Fatalf("probe with a wrong pid: err = %v", err)
	}
	if err := probe(s.Addr(), pidOf(t, s)); err != nil {
		t.Fatalf("probe with the right pid: %v", err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	_, err := StartProcess(WithArgs("--no-such-directive", "1"))
	if err == nil {
		t.Fatal("StartProcess with a bad directive succeeded")
	}
	// The reason lives in redis' own output; without it the error is useless.
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("error lacks the log tail: %v", err)
	}
	t.Logf("error as reported: %v", err)
}

// Not parallel: it changes PATH for the whole process.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartProcess()
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Fatalf("StartProcess without redis-server: err = %v, want an install hint", err)
	}
}

// TestClockShift steps the server's wall clock forward and back as an NTP step would: TIME moves
// by the step, a key whose expiry the forward step passes is gone, a backward step lengthens the
// life left to a key, and a Restart keeps the offset.
func TestClockShift(t *testing.T) {
	t.Parallel()
	s := Start(t, WithClockShift())
	rdb := s.Client(t)
	c := ctx(t)
	serverNow := func() time.Time {
		t.Helper()
		now, err := rdb.Time(c).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		return now
	}
	near := func(what string, got, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -2*time.Second || d > 2*time.Second {
			t.Fatalf("%s: server clock %s, want about %s (off by %s)", what, got, want, d)
		}
	}
	near("unshifted", serverNow(), time.Now())

	if err := rdb.Set(c, "lease", "held", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	s.ShiftClock(t, time.Hour)
	near("an hour ahead", serverNow(), time.Now().Add(time.Hour))
	if n, err := rdb.Exists(c, "lease").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS lease after a forward step past its expiry = %d, %v; want 0", n, err)
	}

	if err := rdb.Set(c, "lease", "held", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	s.ShiftClock(t, time.Hour-time.Minute) // a backward step of a minute
	if left, err := rdb.PTTL(c, "lease").Result(); err != nil || left < time.Minute {
		t.Fatalf("PTTL lease after a backward step of 1m = %s, %v; want more than 1m", left, err)
	}

	s.Restart(t)
	near("restarted, still 59m ahead", serverNow(), time.Now().Add(time.Hour-time.Minute))
	s.ShiftClock(t, -30*time.Minute)
	near("30m behind", serverNow(), time.Now().Add(-30*time.Minute))
}
