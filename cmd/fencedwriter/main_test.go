package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/fencedstore"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

func setToken(t *testing.T, token int64) {
	t.Setenv(batchv1alpha1.EnvFencingToken, strconv.FormatInt(token, 10))
	t.Setenv(batchv1alpha1.EnvLock, "demo")
}

func TestWritesUnderItsToken(t *testing.T) {
	srv := redisserver.Start(t)
	setToken(t, 7)
	if code := run(options{addr: srv.Addr(), writes: 3, interval: time.Millisecond, exitCode: 3}); code != 3 {
		t.Fatalf("exit code %d, want the requested 3", code)
	}
	if h := expectAllAccepted(t, fencedstore.New(srv.Client(t), "fencedstore:demo"), 7); len(h) != 3 {
		t.Fatalf("history %+v, want 3 accepted writes", h)
	}
}

// expectAllAccepted fails t unless every entry of store's history is a write accepted under token,
// and returns the history.
func expectAllAccepted(t *testing.T, store *fencedstore.Store, token int64) []fencedstore.Entry {
	t.Helper()
	h, err := store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h {
		if e.Result != fencedstore.ResultAccepted || e.Token != token {
			t.Fatalf("entry %+v, want accepted with token %d", e, token)
		}
	}
	return h
}

// With --until-key a run writes until the key appears, then ends as a run of its writes does.
func TestStopsWritingOnceTheKeyExists(t *testing.T) {
	srv := redisserver.Start(t)
	setToken(t, 9)
	rdb := srv.Client(t)
	store := fencedstore.New(rdb, "fencedstore:demo")
	done := make(chan int, 1)
	go func() {
		done <- run(options{addr: srv.Addr(), writes: 0, interval: time.Millisecond, untilKey: "drill:done"})
	}()
	// The key is set only once the run has written: it stops on the key, not before its first write.
	for {
		h, err := store.History(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(h) >= 3 {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("ended (exit %d) before the key was set", code)
		case <-time.After(time.Millisecond):
		}
	}
	if err := rdb.Set(context.Background(), "drill:done", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still writing 10 s after the key was set")
	}
	expectAllAccepted(t, store, 9)
}

// A semaphore's holders write side by side, each to its slot's partition, fenced against the
// earlier holders of that slot only.
func TestASemaphoreHolderWritesToItsSlot(t *testing.T) {
	srv := redisserver.Start(t)
	slot0 := fencedstore.New(srv.Client(t), "fencedstore:demo")
	if err := slot0.Write(context.Background(), 50, "slot-0-holder", "x"); err != nil {
		t.Fatal(err)
	}
	setToken(t, 8) // below slot 0's token: another slot's holder is not stale
	t.Setenv(batchv1alpha1.EnvSlot, "1")
	if code := run(options{addr: srv.Addr(), writes: 2, interval: time.Millisecond}); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	h, err := fencedstore.New(srv.Client(t), "fencedstore:demo:slot1").History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Result != fencedstore.ResultAccepted || h[1].Result != fencedstore.ResultAccepted {
		t.Fatalf("slot 1's history %+v, want two accepted writes of token 8", h)
	}
	if h0, _ := slot0.History(context.Background()); len(h0) != 1 {
		t.Fatalf("slot 0's history %+v, want only its own holder's write", h0)
	}
}

func TestAStaleWriterIsRefused(t *testing.T) {
	srv := redisserver.Start(t)
	store := fencedstore.New(srv.Client(t), "fencedstore:demo")
	if err := store.Write(context.Background(), 9, "newer", "x"); err != nil {
		t.Fatal(err)
	}
	setToken(t, 8)
	if code := run(options{addr: srv.Addr(), writes: 2, interval: time.Millisecond}); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	h, _ := store.History(context.Background())
	refused := 0
	for _, e := range h {
		if e.Result == fencedstore.ResultRefused && e.Token == 8 && e.Highest == 9 {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("history %+v, want both writes of token 8 refused", h)
	}
}

func TestRefusesToRunWithoutAToken(t *testing.T) {
	t.Setenv(batchv1alpha1.EnvFencingToken, "")
	if code := run(options{addr: "127.0.0.1:1", writes: 1, interval: time.Millisecond}); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
}

// SIGTERM (what the kubelet sends when the operator stops the Job) ends the writer with 143 and
// leaves a note in the store's history.
func TestSIGTERMIsRecorded(t *testing.T) {
	srv := redisserver.Start(t)
	store := fencedstore.New(srv.Client(t), "fencedstore:demo")
	setToken(t, 5)
	done := make(chan int, 1)
	go func() { done <- run(options{addr: srv.Addr(), writes: 0, interval: 10 * time.Millisecond}) }()
	// Signal once the writer has written (so it is in its loop, with the handler installed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := store.History(context.Background())
		if err == nil && len(h) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no write within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 143 {
			t.Fatalf("exit code %d, want 143", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(errors.New("writer did not stop on SIGTERM"))
	}
	h, _ := store.History(context.Background())
	last := h[len(h)-1]
	if last.Result != fencedstore.ResultNote || last.Writer == "" {
		t.Fatalf("last entry %+v, want the SIGTERM note", last)
	}
}

func TestShowPrintsTheHistoryAndCounts(t *testing.T) {
	srv := redisserver.Start(t)
	store := fencedstore.New(srv.Client(t), "s")
	ctx := context.Background()
	_ = store.Write(ctx, 2, "b", "x")
	_ = store.Write(ctx, 1, "a", "late")
	var out strings.Builder
	if code := show(options{addr: srv.Addr(), store: "s"}, &out); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"accepted  token=2 writer=b", "refused   token=1 writer=a (highest seen 2)", "store s: 1 accepted, 1 refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestShowFailsWhenItCannotWrite: a reader that went away (a closed pipe) makes --show exit
// non-zero, so a script never takes a short history for the whole one.
func TestShowFailsWhenItCannotWrite(t *testing.T) {
	srv := redisserver.Start(t)
	if err := fencedstore.New(srv.Client(t), "s").Write(context.Background(), 1, "a", "x"); err != nil {
		t.Fatal(err)
	}
	if code := show(options{addr: srv.Addr(), store: "s"}, closedPipe{}); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
}

// closedPipe fails every write, as stdout does once its reader has gone.
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, errors.New("write |1: broken pipe") }
