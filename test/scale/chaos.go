//go:build scale

package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// supervisor runs the operator of one scenario. With a kill period (issue 28's chaos at scale) it
// SIGKILLs the operator every period and starts a new one at once: no graceful stop, so the leader
// lease is not given back, held locks are not released, and the successor must wait the lease out
// and re-adopt what its predecessor held. Without one it is the one operator of the scenario.
type supervisor struct {
	bin     string
	args    []string
	env     []string // added to the benchmark's own environment
	logBase string   // each life logs to logBase-<n>.log: startOperator waits for its own start line
	// pprofAddr serves the process's /debug/pprof on loopback, when the run profiles it ("" if not).
	pprofAddr string

	mu       sync.Mutex
	current  *operator
	lives    int
	killed   int
	deadCPU  time.Duration // CPU of the lives already ended, so usage sums every life
	maxRSS   int64         // highest RSS of the lives ended since the last takeMaxRSS
	failure  error         // an exit the supervisor did not cause, or a start that failed
	killedOp *operator     // the life last killed, until its successor is up
	halt     chan struct{}
	halted   sync.WaitGroup
}

func startSupervisor(ctx context.Context, bin string, args, env []string, logBase string, killEvery time.Duration) (*supervisor, error) {
	s := &supervisor{bin: bin, args: args, env: env, logBase: logBase, halt: make(chan struct{})}
	op, err := s.startLife(ctx)
	if err != nil {
		return nil, err
	}
	s.current = op
	if killEvery > 0 {
		s.halted.Go(func() { s.killEvery(ctx, killEvery) })
	}
	return s, nil
}

func (s *supervisor) startLife(ctx context.Context) (*operator, error) {
	s.mu.Lock()
	s.lives++
	path := fmt.Sprintf("%s-%d.log", s.logBase, s.lives)
	s.mu.Unlock()
	return startOperator(ctx, s.bin, s.args, s.env, path)
}

// killEvery is the chaos loop: every period, SIGKILL the operator and start the next one. The
// period runs from kill to kill, so the restart (the wait for the leader lease included) is part
// of it, as a crash loop's would be.
func (s *supervisor) killEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.halt:
			return
		case <-t.C:
		}
		if err := s.killAndRestart(ctx); err != nil {
			s.mu.Lock()
			s.failure = err
			s.mu.Unlock()
			return
		}
	}
}

func (s *supervisor) killAndRestart(ctx context.Context) error {
	s.mu.Lock()
	op := s.current
	if op.exited() {
		s.mu.Unlock()
		return fmt.Errorf("operator exited before it was killed: %v\n%s", op.waitErr, tail(op.logPath))
	}
	// Read before the kill: a reaped process has no /proc entry.
	if cpu, err := procCPU(op.pid()); err == nil {
		s.deadCPU += cpu
	}
	s.maxRSS = max(s.maxRSS, op.takeMaxRSS())
	s.killedOp = op
	_ = op.cmd.Process.Signal(syscall.SIGKILL)
	s.killed++
	s.mu.Unlock()
	<-op.done
	log.Printf("chaos: SIGKILLed operator pid %d (kill %d)", op.pid(), s.kills())

	next, err := s.startLife(ctx)
	if err != nil {
		return fmt.Errorf("restart after kill %d: %w", s.kills(), err)
	}
	s.mu.Lock()
	s.current = next
	s.mu.Unlock()
	return nil
}

// exited is closed when the current life exits.
func (s *supervisor) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current.done
}

// failed returns why the scenario cannot go on: an operator that exited on its own, or one the
// supervisor could not start again.
func (s *supervisor) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		return s.failure
	}
	if op := s.current; op.exited() && !s.killedLast(op) {
		return fmt.Errorf("operator exited: %v\n%s", op.waitErr, tail(op.logPath))
	}
	return nil
}

// killedLast reports whether op is the life the supervisor killed and is replacing.
func (s *supervisor) killedLast(op *operator) bool { return op == s.killedOp }

func (s *supervisor) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current.pid()
}

// livePID is the running operator's pid, and false while the supervisor replaces a killed one.
func (s *supervisor) livePID() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current.pid(), !s.killedLast(s.current)
}

func (s *supervisor) kills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// cpu is the CPU time of every life so far.
func (s *supervisor) cpu() (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := procCPU(s.current.pid())
	if err != nil && !s.killedLast(s.current) {
		// The issue saw the operator lose its lease and exit under load: a scenario without it
		// measures nothing.
		return 0, fmt.Errorf("the operator is gone: %w", err)
	}
	return s.deadCPU + cur, nil
}

// takeMaxRSS returns the highest RSS of any life since the last call and starts over.
func (s *supervisor) takeMaxRSS() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := max(s.maxRSS, s.current.takeMaxRSS())
	s.maxRSS = 0
	return m
}

// stop ends the kill loop, then stops the operator gracefully.
func (s *supervisor) stop() {
	close(s.halt)
	s.halted.Wait()
	s.mu.Lock()
	op := s.current
	s.mu.Unlock()
	op.stop() // a life already killed only stops its sampling
}

// durableKeySuffixes are the keys a lock keeps in Redis after its last holder and waiter are
// gone, by design (docs/design.md, The lock): its fence counters, so a later holder's token is
// higher, and a semaphore's stored N. Release marks are kept too, until they expire (durable).
var durableKeySuffixes = []string{":fence", ":permits"}

// leftKeys waits up to timeout until Redis holds nothing of the locks of namespace ns beyond
// their durable keys, and returns what is left then: the keys of a holder, a waiter or a queue
// that outlived every object of the scenario, a leak.
func leftKeys(ctx context.Context, rdb *redis.Client, clusterID, ns string, timeout time.Duration) ([]string, error) {
	pattern := "lockedjob:{ns/" + clusterID + "/" + ns + "/*"
	var left []string
	scan := func() (bool, error) {
		left = left[:0]
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if !durable(iter.Val()) {
				left = append(left, iter.Val())
			}
		}
		if err := iter.Err(); err != nil {
			left = nil
			return false, fmt.Errorf("scan %s: %w", pattern, err)
		}
		return len(left) == 0, nil
	}
	if err := poll(ctx, timeout, 500*time.Millisecond, scan); err != nil && len(left) == 0 {
		return nil, err
	}
	return left, nil
}

func durable(key string) bool {
	if lockbook.IsReleaseMark(key) {
		return true
	}
	_, suffix, _ := strings.Cut(key, "}")
	for _, d := range durableKeySuffixes {
		if strings.HasSuffix(suffix, d) {
			return true
		}
	}
	return false
}
