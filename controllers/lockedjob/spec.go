package lockedjob

import (
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Spec defaults and small readers of a LockedJob.

func ttlOf(lj *batchv1alpha1.LockedJob) time.Duration {
	if lj.Spec.Lock.TTL != nil {
		return lj.Spec.Lock.TTL.Duration
	}
	return defaultTTL
}

func renewIntervalOf(lj *batchv1alpha1.LockedJob) time.Duration {
	if lj.Spec.Lock.RenewInterval != nil {
		return lj.Spec.Lock.RenewInterval.Duration
	}
	return 0 // the keeper's default: a third of the lease
}

// renewalPeriod is how often the keeper renews lj's lease: spec.lock.renewInterval, or a third of
// the ttl (redislock.Keeper.Add's default).
func renewalPeriod(lj *batchv1alpha1.LockedJob) time.Duration {
	if d := renewIntervalOf(lj); d > 0 {
		return d
	}
	return ttlOf(lj) / 3
}

func derefInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func derefInt64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
