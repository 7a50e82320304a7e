/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the pause program, so the tests run the real main without a build.
const beThePause = "LOCKEDJOB_PAUSE_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beThePause) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const deadline = 10 * time.Second

func TestExitsZeroOnStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, stderr := startPause(t, nil)
			// pause warns that it is not PID 1 only once its handlers are in place.
			waitLine(t, stderr, "Warning: pause should be the first process")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("signal: %v", err)
			}
			if err := waitExit(t, cmd); err != nil {
				t.Fatalf("pause after %s: %v, want exit status 0", sig, err)
			}
		})
	}
}

// TestReapsOrphans runs pause as PID 1 of a new PID namespace, as in a pod, and leaves an orphan
// in it: the orphan is reparented to pause and must not stay a zombie once it exits.
func TestReapsOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace (CLONE_NEWPID)")
	}
	// As PID 1 pause prints nothing to wait for; it reaps an orphan however early it exits (an
	// exit before its SIGCHLD handler is collected right after the handler is set), and every
	// reap happens after its SIGTERM handler is set, so the SIGTERM below cannot race it.
	cmd, _ := startPause(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID})
	pid := cmd.Process.Pid

	// nsenter's child runs sh inside the namespace; sh exits at once and leaves sleep to pause.
	// sleep must not hold the output pipe, or CombinedOutput would return only after it exited.
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--pid", "--",
		"sh", "-c", "sleep 1 </dev/null >/dev/null 2>&1 & exit 0").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	orphan := pollFor(t, "an orphan reparented to pause", func() (int, bool) {
		kids := children(t, pid)
		return firstOr0(kids), len(kids) > 0
	})
	pollFor(t, fmt.Sprintf("orphan %d reaped (gone from /proc, not a zombie)", orphan), func() (int, bool) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", orphan))
		return 0, errors.Is(err, os.ErrNotExist)
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal: %v", err)
	}
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("pause as PID 1 after SIGTERM: %v, want exit status 0", err)
	}
}

func startPause(t *testing.T, attr *syscall.SysProcAttr) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), beThePause+"=1")
	cmd.SysProcAttr = attr
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pause: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, bufio.NewReader(stderr)
}

// waitLine reads r until a line equal to want, within the deadline.
func waitLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	found := make(chan error, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				found <- fmt.Errorf("pause's stderr ended before %q: %w", want, err)
				return
			}
			if strings.TrimSpace(line) == want {
				found <- nil
				return
			}
		}
	}()
	select {
	case err := <-found:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadline):
		t.Fatalf("pause did not print %q within %s", want, deadline)
	}
}

func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(deadline):
		t.Fatalf("pause did not exit within %s", deadline)
		return nil
	}
}

// children lists the direct children of pid (all threads).
func children(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatalf("list threads of %d: %v", pid, err)
	}
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue // the thread exited meanwhile
		}
		for f := range strings.FieldsSeq(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

func firstOr0(l []int) int {
	if len(l) == 0 {
		return 0
	}
	return l[0]
}

// pollFor polls cond until it holds or the deadline passes, and returns its value.
func pollFor(t *testing.T, what string, cond func() (int, bool)) int {
	t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		if v, ok := cond(); ok {
			return v
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", deadline, what)
	return 0
}
