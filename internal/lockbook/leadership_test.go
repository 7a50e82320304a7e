package lockbook

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// bookWitness records what a book does with the API server on a loss: Job stops, renewal-failure
// Events and reconciler wake-ups.
type bookWitness struct {
	mu          sync.Mutex
	stops       []Workload
	renewFailed []types.UID
}

func (w *bookWitness) attach(b *Book) {
	b.SetHandlers(locks.KindLockedJob, Handlers{OnRenewFailed: func(wl Workload, _ error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.renewFailed = append(w.renewFailed, wl.UID)
	}, StopWorkload: func(_ context.Context, wl Workload, _ error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.stops = append(w.stops, wl)
	}})
}

func (w *bookWitness) counts() (stops, renewFailed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stops), len(w.renewFailed)
}

// waitFor polls cond every 10 ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRenewOnlyBookDropsLossesQuietly: a process that lost its leadership keeps renewing its
// locks, but a lock it then loses (the new leader released it) or whose lease is at risk (Redis
// does not answer) must not lead to any API write: no Job stop, no Event, no reconcile. The book
// drops the lock, and the leader re-observes the LockedJob. The leading rows show that the same
// faults do act while the book leads, so the test can tell the two apart.
func TestRenewOnlyBookDropsLossesQuietly(t *testing.T) {
	srv := redisserver.Start(t)
	rdb := srv.Client(t)

	cases := map[string]struct {
		leading bool
		// fault makes the lock lost or at risk; proxy is the tracked lock's path to Redis.
		fault func(t *testing.T, l *redislock.Lock, proxy *faultproxy.Proxy)
	}{
		"released by the new leader, not leading": {fault: deleteKey(rdb)},
		"released by the new leader, leading":     {leading: true, fault: deleteKey(rdb)},
		"lease at risk, not leading":              {fault: blackhole},
		"lease at risk, leading":                  {leading: true, fault: blackhole},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			proxy, err := faultproxy.Start(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			proxied := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = proxied.Close() })
			lockClient, err := redislock.New(proxied, redislock.WithKeyPrefix(t.Name()+":"))
			if err != nil {
				t.Fatal(err)
			}
			book := New(lockClient)
			t.Cleanup(book.Stop)
			var w bookWitness
			w.attach(book)

			ctx := t.Context()
			lead := book.Leadership() // the manager's runnable: not leading until it starts
			if tc.leading {
				go func() { _ = lead.Start(ctx) }()
				waitFor(t, 5*time.Second, "the book does not lead after its runnable started", book.Leading)
			}
			if book.Leading() != tc.leading {
				t.Fatalf("Leading() = %v, want %v", book.Leading(), tc.leading)
			}

			lock := trackedLock(t, book, lockClient, 1500*time.Millisecond)
			tc.fault(t, lock, proxy)

			if tc.leading {
				waitFor(t, 10*time.Second, "the leader did not stop the Job of the lost lock", func() bool {
					stops, _ := w.counts()
					return stops == 1
				})
				select {
				case <-book.Events(locks.KindLockedJob):
				case <-time.After(10 * time.Second):
					t.Fatal("the leader did not wake the reconciler")
				}
				if book.Lost("u") == nil {
					t.Fatal("the leader must keep the loss until the reconciler records it")
				}
				return
			}

			waitFor(t, 10*time.Second, "the follower kept the lock in its book", func() bool {
				return book.Holding("u") == nil && book.Len() == 0
			})
			// A stop or a wake-up would be on its way by now (they are started with the loss);
			// watch a while longer that none comes.
			until := time.Now().Add(500 * time.Millisecond)
			for time.Now().Before(until) {
				if stops, renewFailed := w.counts(); stops+renewFailed > 0 {
					t.Fatalf("a follower wrote to the API server: %d Job stops, %d RenewFailed Events", stops, renewFailed)
				}
				select {
				case ev := <-book.Events(locks.KindLockedJob):
					t.Fatalf("a follower woke the reconciler for %s", ev.Object.GetName())
				case <-time.After(20 * time.Millisecond):
				}
			}
			if book.Lost("u") != nil {
				t.Fatal("a follower recorded a loss: the next leader would act on it without looking")
			}
		})
	}
}

func deleteKey(rdb *redis.Client) func(t *testing.T, l *redislock.Lock, _ *faultproxy.Proxy) {
	return func(t *testing.T, l *redislock.Lock, _ *faultproxy.Proxy) {
		t.Helper()
		if err := rdb.Del(context.Background(), l.RedisKey()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func blackhole(_ *testing.T, _ *redislock.Lock, p *faultproxy.Proxy) { p.Blackhole() }

// TestLeadershipFollowsItsManager: the book leads while its runnable runs, not before and not
// after; a runnable of an earlier manager that ends late does not demote the current one.
func TestLeadershipFollowsItsManager(t *testing.T) {
	book, _, _ := unitLocks(t)
	if !book.Leading() {
		t.Fatal("a book without leader election must lead")
	}

	start := func(r interface{ Start(context.Context) error }) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = r.Start(ctx)
		}()
		return func() { cancel(); <-done }
	}

	first := book.Leadership()
	if book.Leading() {
		t.Fatal("leading before the manager was elected")
	}
	stopFirst := start(first)
	waitFor(t, 5*time.Second, "not leading after the election", book.Leading)
	second := book.Leadership() // the next manager, built while the first one's runnable lingers
	stopSecond := start(second)
	waitFor(t, 5*time.Second, "the second manager's election did not make the book lead", book.Leading)
	stopFirst()
	if !book.Leading() {
		t.Fatal("the first manager's late end demoted the second's leadership")
	}
	stopSecond()
	if book.Leading() {
		t.Fatal("still leading after the manager stopped")
	}
}
