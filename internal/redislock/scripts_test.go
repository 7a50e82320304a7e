package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// flushScripts empties the node's script cache, as a restart or a failover does.
func flushScripts(t *testing.T, rc redis.Cmdable) {
	t.Helper()
	if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// TestScriptsReloadAfterFlush: every verb works on a node that forgot the scripts, in a single call
// and in a pipeline (the WAIT of WithWaitReplicas, the keeper's renewals on a client that is not a
// plain one and so cannot load the script in the pipeline itself).
func TestScriptsReloadAfterFlush(t *testing.T) {
	c, srv, rc := single(t, WithReleaseNotifications(releaseChannel))
	ctx := context.Background()
	key := uniqueKey(t)
	steps := []struct {
		name string
		do   func() error
	}{
		{"acquire", func() error { l, err := c.Acquire(ctx, key, time.Minute); _ = l.Release(ctx); return err }},
		{"acquire queued", func() error {
			_, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute))
			return err
		}},
		{"keep queued", func() error { _, err := c.KeepQueued(ctx, key, time.Minute, "b"); return err }},
		{"lineup", func() error { _, err := c.Lineup(ctx, key, 1); return err }},
		{"inspect", func() error { _, err := c.Inspect(ctx, key); return err }},
		{"dequeue", func() error { return c.Dequeue(ctx, key, "b") }},
	}
	for _, s := range steps {
		flushScripts(t, rc)
		if err := s.do(); err != nil {
			t.Fatalf("%s after SCRIPT FLUSH: %v", s.name, err)
		}
	}
	l := mustAcquire(t, c, uniqueKey(t), time.Minute)
	flushScripts(t, rc)
	if err := l.Renew(ctx, 0); err != nil {
		t.Fatalf("renew after SCRIPT FLUSH: %v", err)
	}
	flushScripts(t, rc)
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("ttl after SCRIPT FLUSH: %v", err)
	}
	flushScripts(t, rc)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}

	// WAIT shares a pipeline with the acquire script: without the script the pipeline fails on
	// NOSCRIPT; with it, WAIT runs and finds no replica.
	waiting, err := New(rc, WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	flushScripts(t, rc)
	if _, err := waiting.Acquire(ctx, uniqueKey(t), time.Minute); err == nil || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Fatalf("acquire WithWaitReplicas after SCRIPT FLUSH: %v, want WAIT to run and find no replica", err)
	}

	// A Ring is not a plain client: its keeper pipeline meets NOSCRIPT and must load and resend.
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"only": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	rcl, err := New(ring)
	if err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, rcl, uniqueKey(t), 2*time.Second)
	renewed := make(chan error, 4)
	k := rcl.NewKeeper(KeeperOptions{
		OnRenew: func(_ *Lock, err error) { renewed <- err },
		OnLost:  func(_ *Lock, err error) { renewed <- errors.Join(ErrLockLost, err) },
	})
	defer k.Stop()
	flushScripts(t, rc)
	if err := k.Add(held, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-renewed:
		if err != nil {
			t.Fatalf("keeper renewal through a ring after SCRIPT FLUSH: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the keeper did not renew")
	}
}
