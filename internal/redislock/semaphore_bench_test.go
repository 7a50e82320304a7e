package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// BenchmarkSemaphoreCycle: one Acquire and Release per op on a free lock, plain and as a semaphore
// (whose scripts read all 64 slots in one MGET), with and without a queue. The plain lock's numbers
// are BenchmarkUncontended's in test/bench; this shows what a semaphore costs on top.
func BenchmarkSemaphoreCycle(b *testing.B) {
	c, _, _ := single(b)
	ctx := context.Background()
	for _, permits := range []int{0, 1, 3} {
		for _, queued := range []bool{false, true} {
			b.Run(fmt.Sprintf("permits=%d/queued=%v", permits, queued), func(b *testing.B) {
				key := uniqueKey(b)
				var opts []AcquireOption
				if permits > 0 {
					opts = append(opts, WithPermits(permits))
				}
				if queued {
					opts = append(opts, WithQueue("bench", 0, time.Minute))
				}
				b.ReportAllocs()
				for b.Loop() {
					l, err := c.Acquire(ctx, key, time.Minute, opts...)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
