package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeManager writes a shell script that stands in for the manager: it logs its arguments and
// ReadyLine, then does what body says. The launcher only cares about processes, logs and signals.
func fakeManager(t *testing.T, body string) *Launcher {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	script := "#!/bin/sh\necho \"args: $*\"\necho '" + ReadyLine + "'\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Launcher{Bin: bin, Dir: dir, Name: "fake"}
}

func TestLauncherStopsPausesAndKills(t *testing.T) {
	l := fakeManager(t, "exec sleep 30")
	p, err := l.Start(Flags{KeyPrefix: "x:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Name != "fake-01" || filepath.Base(p.LogPath) != "fake-01.log" {
		t.Errorf("first process is %s logging to %s, want fake-01 and fake-01.log", p.Name, p.LogPath)
	}
	head, _, _ := strings.Cut(p.LogTail(100), "\n")
	if want := "# " + l.Bin + " --kubeconfig "; !strings.HasPrefix(head, want) {
		t.Errorf("log starts %q, want the command line (%q...)", head, want)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	// Stop on a paused process still ends it: SIGCONT lets it see SIGTERM.
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if forced, err := p.Stop(); forced || err != nil {
		t.Fatalf("Stop = forced %v, %v; want a graceful stop", forced, err)
	}
	if !p.Exited() {
		t.Fatal("process runs after Stop")
	}

	q, err := l.Start(Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.WaitReady(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Kill(); err != nil {
		t.Fatal(err)
	}
	if got := len(l.Processes()); got != 2 {
		t.Errorf("launcher keeps %d processes, want 2", got)
	}
	if err := q.Resume(); err != nil {
		t.Errorf("Resume of an exited process: %v, want nothing", err)
	}
}

func TestLauncherReportsOnlyUnaskedExits(t *testing.T) {
	l := fakeManager(t, "sleep 0.2; echo 'panic: boom'; exit 3")
	var mu sync.Mutex
	var crashed []string
	l.OnUnaskedExit = func(p *Process, err error) {
		mu.Lock()
		defer mu.Unlock()
		crashed = append(crashed, p.Name+": "+err.Error())
	}
	m := l.Mark()
	p, err := l.Start(Flags{})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	mu.Lock()
	got := strings.Join(crashed, "; ")
	mu.Unlock()
	if got != "fake-01: exit status 3" {
		t.Errorf("unasked exits %q, want fake-01's exit status 3", got)
	}
	line, log, ok := l.FirstLineSince(m, func(s string) bool { return strings.HasPrefix(s, "panic: ") })
	if !ok || line != "panic: boom" || log != p.LogPath {
		t.Errorf("FirstLineSince = %q in %s (%v), want the panic in %s", line, log, ok, p.LogPath)
	}
	if _, _, ok := l.FirstLineSince(l.Mark(), func(string) bool { return true }); ok {
		t.Error("FirstLineSince the end of the logs found a line")
	}

	// A process that exits while starting ends the wait at once.
	q, err := l.Start(Flags{})
	if err != nil {
		t.Fatal(err)
	}
	<-q.Done()
	if err := q.WaitReady(time.Minute); err == nil || !strings.Contains(err.Error(), "exited while starting") {
		t.Errorf("WaitReady of an exited process: %v", err)
	}
}

func TestLogSinceSpansRestarts(t *testing.T) {
	l := fakeManager(t, "true")
	first, err := l.Start(Flags{ClusterID: "one"})
	if err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	m := l.Mark()
	second, err := l.Start(Flags{ClusterID: "two"})
	if err != nil {
		t.Fatal(err)
	}
	<-second.Done()
	since := l.LogSince(m)
	if strings.Contains(since, "--cluster-id one") || !strings.Contains(since, "--cluster-id two") {
		t.Errorf("LogSince the first process's end:\n%s\nwant only the second process's log", since)
	}
	if all := l.LogSince(LogMark{}); !strings.Contains(all, "--cluster-id one") || !strings.Contains(all, "--cluster-id two") {
		t.Errorf("LogSince the start:\n%s\nwant both logs", all)
	}
}
