package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// exampleRedis is the address of the redis-server the examples run against; TestMain starts it,
// since an example has no testing.T to clean up after it, and closes exampleConns after them.
var (
	exampleRedis string
	exampleConns []*redis.Client
)

func TestMain(m *testing.M) {
	srv, err := redisserver.StartProcess()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleRedis = srv.Addr()
	code := m.Run()
	for _, rdb := range exampleConns {
		_ = rdb.Close()
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// exampleClient returns a lock client for the examples' redis-server.
func exampleClient() *redislock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	exampleConns = append(exampleConns, rdb)
	locks, err := redislock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	return locks
}

// Acquire a lock, renew it, pass its fencing token with every write to the resource it protects,
// and release it. The resource remembers the highest token it has seen and refuses lower ones, so
// a holder that lost its lock without noticing cannot overwrite the work of the next one.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer func() { _ = rdb.Close() }()
	locks, err := redislock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}

	// The protected resource: it accepts a write only with a token at least as high as any before.
	var highest int64
	write := func(fence int64) error {
		if fence < highest {
			return fmt.Errorf("fencing token %d is stale (seen %d)", fence, highest)
		}
		highest = fence
		return nil
	}

	first, err := locks.Acquire(ctx, "reports/daily", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := locks.Acquire(ctx, "reports/daily", 30*time.Second); errors.Is(err, redislock.ErrNotAcquired) {
		fmt.Println("a second caller is refused while the lock is held")
	}
	if err := first.Renew(ctx, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first writes:", write(first.Fence()))
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := locks.Acquire(ctx, "reports/daily", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = second.Release(ctx) }()
	fmt.Println("second writes:", write(second.Fence()))
	// The first holder, paused past its lease, comes back and tries to write again.
	fmt.Println("first writes again:", write(first.Fence()) != nil)
	// Output:
	// a second caller is refused while the lock is held
	// first writes: <nil>
	// second writes: <nil>
	// first writes again: true
}

// Waiters take turns in a queue: a free lock goes only to the waiter at the head, and on a single
// Redis deployment a release hands the lock straight to it. The head finds the lock held with its
// own token at its next attempt: a re-adoption.
func ExampleWithQueue() {
	ctx := context.Background()
	locks := exampleClient() // redislock.New over a go-redis client, as in the package example
	const key = "backups/nightly"
	// The score orders the queue: here, when each waiter started waiting.
	inLine := func(member string, score float64) redislock.AcquireOption {
		return redislock.WithQueue(member, score, time.Minute)
	}

	holder, err := locks.Acquire(ctx, key, time.Minute, inLine("job-a", 1))
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range []struct {
		member string
		score  float64
	}{{"job-c", 3}, {"job-b", 2}} {
		_, err := locks.Acquire(ctx, key, time.Minute, inLine(w.member, w.score))
		if qe, ok := errors.AsType[*redislock.QueuedError](err); ok {
			fmt.Printf("%s waits at position %d\n", w.member, qe.Position)
		}
	}

	// The release hands the lock to job-b, the head of the queue; nobody can slip in between.
	if err := holder.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := locks.Acquire(ctx, key, time.Minute); errors.Is(err, redislock.ErrNotAcquired) {
		fmt.Println("an outsider is refused")
	}
	b, err := locks.Acquire(ctx, key, time.Minute, inLine("job-b", 2))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job-b holds the lock handed to it:", b.Readopted(), b.Fence() > holder.Fence())
	if err := b.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// job-c gives up; it leaves the queue instead of waiting for its liveness to run out.
	if err := locks.Dequeue(ctx, key, "job-c"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// job-c waits at position 1
	// job-b waits at position 1
	// an outsider is refused
	// job-b holds the lock handed to it: true true
}

// A restarted process re-adopts the lock it held by acquiring it with the same token: the lock and
// its fencing token stay as they were. Derive the token from a secret, never from public data.
func ExampleWithToken() {
	ctx := context.Background()
	locks := exampleClient()               // redislock.New over a go-redis client, as in the package example
	const token = "d2VsbC1rZXB0LXNlY3JldA" // e.g. an HMAC of the job's identity
	before, err := locks.Acquire(ctx, "imports/orders", time.Minute, redislock.WithToken(token))
	if err != nil {
		log.Fatal(err)
	}

	// ... the process restarts and has only the token ...
	after, err := locks.Acquire(ctx, "imports/orders", time.Minute, redislock.WithToken(token))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("re-adopted:", after.Readopted(), "same fence:", after.Fence() == before.Fence())
	if err := after.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// re-adopted: true same fence: true
}

// A Keeper renews many locks from one goroutine, batching those that fall due together into one
// pipeline per Redis node. Its callbacks must return at once: hand the work to another goroutine.
func ExampleKeeper() {
	ctx := context.Background()
	locks := exampleClient() // redislock.New over a go-redis client, as in the package example
	renewed := make(chan *redislock.Lock, 1)
	lost := make(chan *redislock.Lock, 1)
	keeper := locks.NewKeeper(redislock.KeeperOptions{
		OnRenew: func(l *redislock.Lock, err error) {
			if err == nil {
				select {
				case renewed <- l:
				default:
				}
			}
		},
		// Stop the work the lock protects: it may already run under another holder.
		OnLost: func(l *redislock.Lock, _ error) { lost <- l },
	})
	defer keeper.Stop()

	lock, err := locks.Acquire(ctx, "sync/inventory", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	acquired := lock.LeaseStart()
	if err := keeper.Add(lock, redislock.MinRenewInterval); err != nil {
		log.Fatal(err)
	}
	select {
	case l := <-renewed:
		fmt.Println("renewed:", l == lock, l.LeaseStart().After(acquired))
	case l := <-lost:
		fmt.Println("lost:", l.Key())
	}
	// Remove before Release, or a renewal in flight may find the lock gone and report it lost.
	keeper.Remove(lock)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// renewed: true true
}

// A semaphore of 2: two holders at once, each in its own slot with its own fencing tokens; a third
// caller waits in line and is handed the slot the next release frees. Whoever declares the lock
// stores its permits once (SetPermits); acquisitions read them.
func ExampleWithPermits() {
	ctx := context.Background()
	locks := exampleClient()
	if err := locks.SetPermits(ctx, "backups", 2); err != nil {
		log.Fatal(err)
	}
	acquire := func(member string, score float64) (*redislock.Lock, error) {
		return locks.Acquire(ctx, "backups", time.Minute, redislock.WithPermits(2),
			redislock.WithQueue(member, score, time.Minute), redislock.WithMetadata(member))
	}

	first, _ := acquire("first", 1)
	second, _ := acquire("second", 2)
	fmt.Println("first holds slot", first.Slot(), "and second slot", second.Slot())

	_, err := acquire("third", 3)
	if qe, ok := errors.AsType[*redislock.QueuedError](err); ok {
		fmt.Println("third waits at position", qe.Position)
	}

	if err := second.Release(ctx); err != nil { // hands slot 1 to the head of the queue
		log.Fatal(err)
	}
	third, err := acquire("third", 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("third holds slot", third.Slot(), "handed off:", third.Readopted(), "fence above second's:", third.Fence() > second.Fence())

	slots, err := locks.InspectSlots(ctx, "backups", 2)
	if err != nil {
		log.Fatal(err)
	}
	for i, st := range slots {
		fmt.Printf("slot %d: held by %s\n", i, st.Metadata)
	}
	_ = first.Release(ctx)
	_ = third.Release(ctx)
	_ = locks.SetPermits(ctx, "backups", 1) // no slot above 0 is held: the lock is plain again
	// Output:
	// first holds slot 0 and second slot 1
	// third waits at position 1
	// third holds slot 1 handed off: true fence above second's: true
	// slot 0: held by first
	// slot 1: held by third
}
