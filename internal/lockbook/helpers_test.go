package lockbook

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// unitLocks starts a real redis-server and returns a lock client over it, a book stopped at the
// end of the test, and a plain client for looking at Redis directly.
func unitLocks(t *testing.T, opts ...redislock.Option) (*Book, *redislock.Client, *redis.Client) {
	t.Helper()
	rc := redisserver.Start(t).Client(t)
	lockClient, err := redislock.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	book := New(lockClient)
	t.Cleanup(book.Stop)
	return book, lockClient, rc
}

// trackedLock acquires lock "k" for ttl and has book renew it every 200ms for a LockedJob whose Job
// is n-1, as an acquisition does.
func trackedLock(t *testing.T, book *Book, c *redislock.Client, ttl time.Duration) *redislock.Lock {
	t.Helper()
	lock, err := c.Acquire(t.Context(), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", UID: "u"}}
	lj.Status.JobName = "n-1"
	if err := book.Track(WorkloadOf(locks.ClaimantOf(lj), lj.Status.JobName), &Lock{l: lock}, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return lock
}
