package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
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
func unitLocks(t *testing.T) (*lockbook.Book, *redislock.Client, *redis.Client) {
	t.Helper()
	rc := redisserver.Start(t).Client(t)
	lockClient, err := redislock.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return bookOver(t, lockClient), lockClient, rc
}

// bookOver returns a lock book over c, stopped at the end of the test.
func bookOver(t *testing.T, c *redislock.Client) *lockbook.Book {
	t.Helper()
	book := lockbook.New(c)
	t.Cleanup(book.Stop)
	return book
}
