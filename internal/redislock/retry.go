package redislock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Acquire waits before its next attempt on a busy lock.
// Backoff gets the number of attempts made so far (1 after the first) and returns the wait and
// whether to try again at all. Strategies hold no state, so one value is safe for any number of
// concurrent Acquire calls; the attempt count lives in the call.
type RetryStrategy interface {
	Backoff(attempt int) (wait time.Duration, retry bool)
}

type retryFunc func(attempt int) (time.Duration, bool)

func (f retryFunc) Backoff(attempt int) (time.Duration, bool) { return f(attempt) }

// NoRetry tries once. It is the default.
func NoRetry() RetryStrategy {
	return retryFunc(func(int) (time.Duration, bool) { return 0, false })
}

// FixedBackoff retries every d until the context passed to Acquire ends.
func FixedBackoff(d time.Duration) RetryStrategy {
	return retryFunc(func(int) (time.Duration, bool) { return d, true })
}

// ExponentialBackoff retries with "full jitter": attempt n waits a uniformly random time in
// [min, min(max, min*2^(n-1))]. Jitter spreads waiters that failed together, so they do not
// hammer Redis in lockstep. It retries until the context passed to Acquire ends.
func ExponentialBackoff(minWait, maxWait time.Duration) RetryStrategy {
	if minWait <= 0 {
		minWait = time.Millisecond
	}
	if maxWait < minWait {
		maxWait = minWait
	}
	return retryFunc(func(attempt int) (time.Duration, bool) {
		ceiling := maxWait
		if shift := attempt - 1; shift < 62 {
			if c := minWait << shift; c > 0 && c < maxWait {
				ceiling = c
			}
		}
		if ceiling <= minWait {
			return minWait, true
		}
		return minWait + rand.N(ceiling-minWait+1), true
	})
}

// LimitRetry stops s after maxRetries retries (maxRetries+1 attempts in all).
func LimitRetry(s RetryStrategy, maxRetries int) RetryStrategy {
	return retryFunc(func(attempt int) (time.Duration, bool) {
		if attempt > maxRetries {
			return 0, false
		}
		return s.Backoff(attempt)
	})
}
