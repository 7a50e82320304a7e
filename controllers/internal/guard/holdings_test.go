package guard

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestReadoptFindsItsOwnRelease (found by the operator model with a deposed leader, for
// LockedJobs): a guarded Job's lock released by its own token under the recorded fence (a deposed
// leader's pass, or its successor's) and taken by the next holder since is re-adopted by a new
// book as released, not lost, and the next holder's lock is left alone; a lock taken from it without
// a release is lost; a lock still held continues under the same fence.
func TestReadoptFindsItsOwnRelease(t *testing.T) {
	ctx := context.Background()
	first, lib, rdb := unit.Locks(t)
	cfg := &Config{Identity: locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}}
	cfg.Defaults()
	claimantOf := func(name string) (locks.Claimant, lockbook.Claim, lockbook.Workload) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db-" + name}}}
		c, err := locks.ClaimantOfJob(job)
		if err != nil {
			t.Fatal(err)
		}
		id := cfg.Identity
		return c, lockbook.Claim{Key: id.LockKey(c), Token: id.Token(c), Holder: id.Holder(c)}, lockbook.WorkloadOf(c, name)
	}
	held := func(name string) (locks.Claimant, lockbook.Claim, lockbook.Workload) {
		c, claim, w := claimantOf(name)
		l, err := Holdings{Locks: first, Permits: locks.PermitReader{}, Config: cfg}.Acquire(ctx, &claim, c, w)
		if err != nil {
			t.Fatal(err)
		}
		claim.Fence = l.Fence()
		return c, claim, w
	}
	released, taken, kept := "released", "taken", "kept"
	rc, rClaim, rw := held(released)
	tc, tClaim, tw := held(taken)
	kc, kClaim, kw := held(kept)
	first.Stop() // the deposed leader's book renews nothing more
	if err := lib.ReleaseToken(ctx, rClaim.Key, rClaim.Token, rClaim.Fence); err != nil {
		t.Fatal(err)
	}
	next, err := lib.Acquire(ctx, rClaim.Key, time.Minute, redislock.WithToken("next-holder"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lib.RedisKey(tClaim.Key)).Err(); err != nil { // its lease ran out
		t.Fatal(err)
	}
	if _, err := lib.Acquire(ctx, tClaim.Key, time.Minute, redislock.WithToken("thief")); err != nil {
		t.Fatal(err)
	}

	successor := Holdings{Locks: unit.Book(t, lib), Permits: locks.PermitReader{}, Config: cfg}
	lock, lost, wasReleased, err := successor.Readopt(ctx, &rClaim, rc, rw, rClaim.Fence)
	if err != nil || lock != nil || lost != nil || !wasReleased {
		t.Fatalf("released by its own token: lock %v, lost %v, released %t, err %v; want released", lock, lost, wasReleased, err)
	}
	if rec := successor.Locks.RecordOf(rw.UID); !rec.Released {
		t.Errorf("the book's record of the released one: %+v, want Released", rec)
	}
	if st, err := lib.Inspect(ctx, rClaim.Key); err != nil || !st.Held || st.Fence != next.Fence() {
		t.Errorf("the next holder's lock: %+v, %v; want it held under fence %d", st, err, next.Fence())
	}
	if _, lost, wasReleased, err := successor.Readopt(ctx, &tClaim, tc, tw, tClaim.Fence); err != nil || lost == nil || wasReleased {
		t.Errorf("taken without a release: lost %v, released %t, err %v; want lost", lost, wasReleased, err)
	}
	if lock, lost, wasReleased, err := successor.Readopt(ctx, &kClaim, kc, kw, kClaim.Fence); err != nil || lost != nil || wasReleased || lock.Fence() != kClaim.Fence {
		t.Errorf("still held: lock %v, lost %v, released %t, err %v; want it continued under fence %d", lock, lost, wasReleased, err, kClaim.Fence)
	}
}
