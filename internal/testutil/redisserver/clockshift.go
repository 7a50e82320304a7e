package redisserver

import (
	"crypto/sha256"
	_ "embed" // the library's source
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// clockShiftSource is the LD_PRELOAD library that shifts redis-server's wall clock.
//
//go:embed clockshift/clockshift.c
var clockShiftSource []byte

// WithClockShift runs the server with a wall clock that ShiftClock moves, as an NTP step on its
// host would: CLOCK_REALTIME, gettimeofday and time (Redis's TIME, key expiry, the scripts'
// clock) read an offset another process sets, through clockshift/clockshift.c, built with the C
// compiler (cc, or $CC) on first use and preloaded. Monotonic clocks keep the host's time. The
// offset starts at zero and survives a Restart.
func WithClockShift() Option {
	return func(c *config) { c.clockShift = true }
}

// ShiftClock sets how far the server's wall clock runs ahead of the host's (behind, if offset is
// negative), from its next clock read on. Stepping from +10s to 0 is a backward step of 10 s.
func (s *Server) ShiftClock(tb TB, offset time.Duration) {
	tb.Helper()
	if s.shift == nil {
		tb.Fatalf("redisserver: ShiftClock on %s, which was not started WithClockShift", s.addr)
		return
	}
	// The library reads the value with one aligned 8-byte load; this is one aligned 8-byte store.
	atomic.StoreInt64((*int64)(unsafe.Pointer(&s.shift[0])), int64(offset))
}

// setUpClockShift builds the library, creates the server's offset file (zero) and maps it shared,
// and returns the environment that preloads the library into the server.
func (s *Server) setUpClockShift() ([]string, error) {
	lib, err := clockShiftLibrary()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(s.dir, "clockshift")
	if err := os.WriteFile(path, make([]byte, 8), 0o600); err != nil {
		return nil, fmt.Errorf("clock shift file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("clock shift file: %w", err)
	}
	defer func() { _ = f.Close() }() // the mapping outlives the descriptor
	m, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the clock shift file: %w", err)
	}
	s.shift = m
	return []string{"LD_PRELOAD=" + lib, "CLOCKSHIFT_FILE=" + path}, nil
}

// unmapClockShift releases the mapping of setUpClockShift, if any.
func (s *Server) unmapClockShift() error {
	if s.shift == nil {
		return nil
	}
	m := s.shift
	s.shift = nil
	return syscall.Munmap(m)
}

var clockShiftBuild struct {
	once sync.Once
	path string
	err  error
}

// clockShiftLibrary builds the library once per source, into the temp folder, where test binaries
// running side by side share it (each renames its build into place).
func clockShiftLibrary() (string, error) {
	b := &clockShiftBuild
	b.once.Do(func() {
		sum := sha256.Sum256(clockShiftSource)
		dir := filepath.Join(os.TempDir(), "lockedjob-clockshift")
		b.path = filepath.Join(dir, "clockshift-"+hex.EncodeToString(sum[:6])+".so")
		if _, err := os.Stat(b.path); err == nil {
			return
		}
		b.err = buildClockShift(dir, b.path)
	})
	return b.path, b.err
}

func buildClockShift(dir, lib string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("clock shift library: %w", err)
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("clock shift library: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	src, out := filepath.Join(work, "clockshift.c"), filepath.Join(work, "clockshift.so")
	if err := os.WriteFile(src, clockShiftSource, 0o600); err != nil {
		return fmt.Errorf("clock shift library: %w", err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src).CombinedOutput(); err != nil {
		return fmt.Errorf("clock shift library: %s: %w\n%s (the race detector needs the same C compiler: apt-get install gcc)", cc, err, b)
	}
	if err := os.Rename(out, lib); err != nil {
		return fmt.Errorf("clock shift library: %w", err)
	}
	return nil
}
