package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Launcher starts manager processes from one binary, each with its own log, and keeps every
// process it started: a suite checks at its end that none is left, and reads the logs of all of
// them across restarts. The zero value is ready once Bin and Dir are set.
type Launcher struct {
	Bin string // the manager binary
	Dir string // where the logs go
	// Name names the processes Name-01, Name-02, ... and their logs Name-01.log, ...
	Name string
	// Env is added to the test's own environment; nil leaves the process the test's.
	Env []string
	// OnUnaskedExit hears of a process that exited without Stop or Kill, before Done is closed:
	// for the fault suite a crash, which the verdict must count.
	OnUnaskedExit func(p *Process, err error)

	mu    sync.Mutex
	seq   int
	procs []*Process
}

// Start starts a manager with f; it returns once the process runs, not once it leads (WaitReady).
func (l *Launcher) Start(f Flags) (*Process, error) {
	l.mu.Lock()
	l.seq++
	name := fmt.Sprintf("%s-%02d", l.Name, l.seq)
	l.mu.Unlock()
	p := &Process{Name: name, LogPath: filepath.Join(l.Dir, name+".log"), done: make(chan struct{})}
	args := f.Args()
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer func() { _ = logFile.Close() }()
	// The log names its own command line, so a kept log says which flags made it.
	_, _ = fmt.Fprintf(logFile, "# %s %s\n", l.Bin, strings.Join(args, " "))
	cmd := exec.Command(l.Bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if l.Env != nil {
		cmd.Env = append(os.Environ(), l.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // ^C on `go test` reaches the suite, which stops the manager itself
		Pdeathsig: syscall.SIGKILL, // a crashed test binary takes its manager with it
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd, p.Started = cmd, time.Now()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	go p.wait(l.OnUnaskedExit)
	return p, nil
}

// Processes returns every process started, oldest first.
func (l *Launcher) Processes() []*Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.procs)
}

// LogMark is a place in a launcher's logs: the index of a process and an offset in its log.
type LogMark struct {
	proc   int
	offset int64
}

// Mark returns where the logs end now, for LogSince and FirstLineSince.
func (l *Launcher) Mark() LogMark {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := LogMark{proc: len(l.procs) - 1}
	if m.proc >= 0 {
		if st, err := os.Stat(l.procs[m.proc].LogPath); err == nil {
			m.offset = st.Size()
		}
	}
	return m
}

// LogSince returns what was logged since m, across restarts.
func (l *Launcher) LogSince(m LogMark) string {
	var b strings.Builder
	for _, c := range l.logsSince(m) {
		b.Write(c.data)
	}
	return b.String()
}

// FirstLineSince returns the first line logged since m that match accepts, and the log it is in.
// Empty lines are passed over: a mark at the end of a log would otherwise read as one.
func (l *Launcher) FirstLineSince(m LogMark, match func(line string) bool) (line, logPath string, ok bool) {
	for _, c := range l.logsSince(m) {
		for line := range strings.SplitSeq(string(c.data), "\n") {
			if line != "" && match(line) {
				return line, c.path, true
			}
		}
	}
	return "", "", false
}

type logChunk struct {
	path string
	data []byte
}

// logsSince reads each log from m on. A log that is shorter than the mark (it was replaced) is
// read whole rather than skipped.
func (l *Launcher) logsSince(m LogMark) []logChunk {
	procs := l.Processes()
	var out []logChunk
	for i := max(m.proc, 0); i < len(procs); i++ {
		data, _ := os.ReadFile(procs[i].LogPath)
		if i == m.proc && int64(len(data)) >= m.offset {
			data = data[m.offset:]
		}
		out = append(out, logChunk{procs[i].LogPath, data})
	}
	return out
}
