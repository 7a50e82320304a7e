package waitbook

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// named names a waiter by a ConfigMap: the keeper only needs an object to wake.
func named(obj types.NamespacedName) client.Object {
	o := &corev1.ConfigMap{}
	o.Namespace, o.Name = obj.Namespace, obj.Name
	return o
}

// TestQueueKeeperKeepsWaitersQueued: waiters that do not ask again stay queued while the keeper
// keeps them, and one that is not queued any more (here: handed the lock) is woken to claim it.
func TestQueueKeeperKeepsWaitersQueued(t *testing.T) {
	ctx := context.Background()
	rc := redisserver.Start(t).Client(t)
	lockClient, err := redislock.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	const key, short = "ns/db", 300 * time.Millisecond
	holder, err := lockClient.Acquire(ctx, key, time.Minute, redislock.WithQueue("holder", 0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []string{"a", "b"} {
		if _, err := lockClient.Acquire(ctx, key, time.Minute, redislock.WithQueue(m, float64(i+1), short)); err == nil {
			t.Fatalf("%s got a held lock", m)
		}
	}
	wake := make(chan event.GenericEvent, 4)
	k := &Keeper{Locks: unit.Book(t, lockClient), Waiting: &Book{}, Liveness: time.Minute, Timeout: time.Second, Named: named, Wake: wake}
	for _, m := range []string{"a", "b"} {
		k.Waiting.Waiting(m, types.NamespacedName{Namespace: "ns", Name: m}, key, time.Now().Add(time.Hour), 0)
	}
	k.Keep(ctx)
	if len(wake) != 0 {
		t.Fatalf("woke %d waiters that are still queued", len(wake))
	}
	joined := time.Now()
	// Past the liveness the waiters joined with, had nobody kept them.
	eventuallyTrue(t, func() bool { return time.Since(joined) > 2*short })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k.Keep(ctx)
	if len(wake) != 1 || (<-wake).Object.GetName() != "a" {
		t.Fatal("the waiter handed the lock was not woken to claim it")
	}
	if what, _, _, _ := k.Waiting.Next("a", time.Now()); what != AskRedis {
		t.Fatal("the waiter handed the lock would not ask Redis at its next pass")
	}
	if st, err := lockClient.Inspect(ctx, key); err != nil || !st.Held {
		t.Fatalf("the lock went to nobody (%+v, %v): the kept waiters dropped out", st, err)
	}
}

// eventuallyTrue polls cond for up to 10 s.
func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestWaitBookAsksOnlyWhenSomethingChanged: a waiter's pass asks Redis when the book does not know
// it, when woken, or when due; records a hint without asking; and otherwise waits on. News that
// comes while a pass runs is kept for the next one.
func TestWaitBookAsksOnlyWhenSomethingChanged(t *testing.T) {
	var b Book
	now := time.Now()
	obj := types.NamespacedName{Namespace: "ns", Name: "w"}
	expect := func(want Ask, at time.Time) Hint {
		t.Helper()
		got, hint, left, _ := b.Next("w", at)
		if got != want {
			t.Fatalf("next = %d, want %d", got, want)
		}
		if got == AskNothing && left <= 0 {
			t.Fatalf("waits on for %v", left)
		}
		return hint
	}
	expect(AskRedis, now) // unknown
	b.Waiting("w", obj, "db", now.Add(time.Minute), handler.LowPriority)
	expect(AskNothing, now)
	expect(AskRedis, now.Add(2*time.Minute)) // due

	b.Wake("w")
	expect(AskRedis, now)
	expect(AskNothing, now) // a wake-up counts once

	b.Tell("w", Hint{Position: 3, At: now})
	if hint := expect(AskHint, now); hint.Position != 3 {
		t.Fatalf("hint %+v", hint)
	}
	expect(AskNothing, now)
	b.Tell("w", Hint{Position: 2, At: now.Add(-2 * HintMaxAge)})
	expect(AskNothing, now) // too old to trust, and nothing else changed

	b.Tell("w", Hint{Position: 2, At: now})
	b.Wake("w") // handed the lock after the lineup: claiming beats the hint
	expect(AskRedis, now)

	expect(AskNothing, now)
	b.Wake("w")                                                          // comes while a pass runs ...
	b.Waiting("w", obj, "db", now.Add(time.Minute), handler.LowPriority) // ... which then records its wait
	expect(AskRedis, now)

	b.Done("w")
	expect(AskRedis, now)
	if b.Tell("w", Hint{Position: 1, At: now}) {
		t.Fatal("a hint was kept for a waiter that no longer waits")
	}
}
