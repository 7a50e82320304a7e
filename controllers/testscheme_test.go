package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/redis/go-redis/v9"
)

// testSchemeForUnit is a scheme for plain unit tests, which run without the envtest suite.
func testSchemeForUnit(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// unitLocks starts a real redis-server and returns a lock client over it, a lock book stopped at
// the end of the test, and a plain client for looking at Redis directly.
func unitLocks(t *testing.T) (*LockBook, *redislock.Client, *redis.Client) {
	t.Helper()
	rc := redisserver.Start(t).Client(t)
	lockClient, err := redislock.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return bookOver(t, lockClient), lockClient, rc
}

// bookOver returns a lock book over c, stopped at the end of the test.
func bookOver(t *testing.T, c *redislock.Client) *LockBook {
	t.Helper()
	book := NewLockBook(c)
	t.Cleanup(book.Stop)
	return book
}

// trackedLock acquires lock "k" for ttl and has book renew it every 200ms for a LockedJob whose Job
// is n-1, as an acquisition does.
func trackedLock(t *testing.T, book *LockBook, c *redislock.Client, ttl time.Duration) *redislock.Lock {
	t.Helper()
	lock, err := c.Acquire(t.Context(), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", UID: "u"}}
	lj.Status.JobName = "n-1"
	if err := book.Track(lj, lock, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return lock
}
