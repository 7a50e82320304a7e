package bench

import (
	"context"
	"testing"

	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestAdapters checks that every benchmark adapter is a real mutual-exclusion lock: a second worker
// on a held key is refused (busy, not an error), and gets the key once the first released it.
// Without this a broken adapter could "win" a benchmark.
func TestAdapters(t *testing.T) {
	single := redisserver.Start(t)
	quorum := redisserver.StartN(t, 3)
	sets := map[string][]impl{
		"single":   singleNodeImpls(t, single.Addr()),
		"redlock3": redlockImpls(t, quorum),
	}
	ctx := context.Background()
	for setName, impls := range sets {
		for _, im := range impls {
			t.Run(setName+"/"+im.name, func(t *testing.T) {
				key := "adapter-" + setName + "-" + im.name
				a, b := im.mk(key, 0), im.mk(key, 0)
				// One cycle first: loading the scripts into Redis costs a NOSCRIPT round trip once.
				if err := cycle(ctx, a); err != nil {
					t.Fatalf("first cycle: %v", err)
				}
				if err := a.Acquire(ctx); err != nil {
					t.Fatalf("first acquire: %v", err)
				}
				err := b.Acquire(ctx)
				if err == nil {
					t.Fatal("second acquire of a held key succeeded")
				}
				if !isBusy(err) {
					t.Fatalf("second acquire: %v is not a busy error", err)
				}
				im.rtt.reset()
				if err := a.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
				if got := im.rtt.total(); got != int64(len(im.rtt)) {
					t.Errorf("release took %d round trips on %d nodes", got, len(im.rtt))
				}
				if err := cycle(ctx, b); err != nil {
					t.Fatalf("acquire after release: %v", err)
				}
			})
		}
	}
}
