package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestCheckEvictionPolicy (issue 9 item 10): a node that may evict keys may evict a held lock, so
// the check names it; noeviction everywhere passes; a refused CONFIG is told apart.
func TestCheckEvictionPolicy(t *testing.T) {
	ctx := context.Background()
	good := redisserver.StartN(t, 2)
	bad := redisserver.Start(t, redisserver.WithArgs("--maxmemory-policy", "allkeys-lru"))

	c, err := NewRedlock([]redis.UniversalClient{good[0].Client(t), good[1].Client(t), bad.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.CheckEvictionPolicy(ctx)
	if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lru") ||
		!strings.Contains(err.Error(), bad.Addr()) || strings.Contains(err.Error(), good[0].Addr()) {
		t.Fatalf("got %v, want ErrEvictionPolicy naming only %s and allkeys-lru", err, bad.Addr())
	}

	ok, err := New(good[0].Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.CheckEvictionPolicy(ctx); err != nil {
		t.Fatalf("noeviction: %v", err)
	}

	// A user whose ACL forbids CONFIG.
	admin := good[1].Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: good[1].Addr(), Username: "locker", Password: "secret", MaxRetries: -1})
	t.Cleanup(func() { _ = limited.Close() })
	lc, err := New(limited)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.CheckEvictionPolicy(ctx); !errors.Is(err, ErrEvictionUnknown) || errors.Is(err, ErrEvictionPolicy) {
		t.Fatalf("CONFIG refused by ACL: %v, want ErrEvictionUnknown", err)
	}
}
