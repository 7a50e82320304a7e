package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestCheckReplicaWrites (issue 28, Sentinel split brain): a primary that accepts writes with no
// replica connected is named; min-replicas-to-write 1 passes.
func TestCheckReplicaWrites(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	err = c.CheckReplicaWrites(ctx)
	if !errors.Is(err, ErrUnreplicatedWrites) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("default configuration: got %v, want ErrUnreplicatedWrites naming %s", err, srv.Addr())
	}
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckReplicaWrites(ctx); err != nil {
		t.Fatalf("min-replicas-to-write 1: %v", err)
	}
}
