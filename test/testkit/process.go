package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	// ReadyLine is what the manager logs once it leads and its controllers' workers run.
	ReadyLine = "Starting workers"
	// StopGrace is how long Stop waits after SIGTERM before it kills: a graceful stop releases
	// the leader lease and the locks, which takes the manager a few seconds at most.
	StopGrace = 15 * time.Second
	// killWait bounds the wait for a SIGKILLed process: only a process stuck in the kernel
	// outlives it.
	killWait = 30 * time.Second
	// tailLines is how much of the log an error about a start carries.
	tailLines = 40
)

// Process is one manager process that a Launcher started.
type Process struct {
	Name    string
	LogPath string
	Started time.Time // when the process started

	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	waitErr error
	asked   bool // Stop or Kill was called: the exit is not a crash
}

func (p *Process) wait(onUnasked func(*Process, error)) {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.waitErr = err
	asked := p.asked
	p.mu.Unlock()
	if !asked && onUnasked != nil {
		onUnasked(p, err)
	}
	close(p.done)
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process exited (nil while it runs, or if it exited 0).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// WaitReady waits until the manager leads and its workers run (ReadyLine in its log). A process
// that exits meanwhile ends the wait at once, with its log's tail in the error.
func (p *Process) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited while starting: %v; log %s:\n%s", p.Name, p.Err(), p.LogPath, p.LogTail(tailLines))
		}
		if b, _ := os.ReadFile(p.LogPath); strings.Contains(string(b), ReadyLine) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has not started its workers after %s; log %s:\n%s", p.Name, timeout, p.LogPath, p.LogTail(tailLines))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM, and SIGCONT should the process be paused, and waits for it to exit; after
// StopGrace it kills it, and forced says so. A graceful stop gives up the leader lease, so a
// successor leads at once. Stop on an exited process does nothing.
func (p *Process) Stop() (forced bool, err error) {
	if !p.ask() {
		return false, nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return false, nil
	case <-time.After(StopGrace):
	}
	return true, p.Kill()
}

// Kill sends SIGKILL, like a crashed node, and waits until the process is gone.
func (p *Process) Kill() error {
	if !p.ask() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s (pid %d) survived SIGKILL for %s", p.Name, p.PID(), killWait)
	}
}

// ask marks an exit the test asked for, so it is not taken for a crash; false if the process has
// exited already.
func (p *Process) ask() bool {
	if p.Exited() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = true
	return true
}

// Pause sends SIGSTOP and returns once every thread of the process is stopped: only then has the
// manager stopped renewing.
func (p *Process) Pause() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %s (pid %d): %w", p.Name, p.PID(), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !utils.ProcessStopped(p.PID()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) not stopped 10s after SIGSTOP", p.Name, p.PID())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Resume sends SIGCONT; nothing if the process has exited.
func (p *Process) Resume() error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s (pid %d): %w", p.Name, p.PID(), err)
	}
	return nil
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return utils.TailFile(p.LogPath, n) }

// LogCount counts the occurrences of s in the process's log.
func (p *Process) LogCount(s string) int {
	b, _ := os.ReadFile(p.LogPath)
	return strings.Count(string(b), s)
}
