package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Acquire acquires the lock named key for ttl. It returns ErrNotAcquired (possibly joined with the
// context's error) when someone else holds the lock, and other errors when Redis could not answer;
// errors.Is tells them apart. Transport errors are not retried here: a lock that Redis cannot grant
// now will not become safe by hammering it, and the caller knows better how long to wait.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	var o acquireOptions
	ttl, k, err := c.prepareAcquire(key, ttl, &o, opts)
	if err != nil {
		return nil, err
	}
	var (
		timer *time.Timer
		watch *releaseWatch
	)
	for attempt := 1; ; attempt++ {
		l, err := c.attemptOnce(ctx, key, &k, ttl, &o)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, fmt.Errorf("acquire %s: %w", key, withContextErr(ctx, err))
		}
		wait, again := o.retry.Backoff(attempt)
		if !again {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		if watch == nil && o.queueMember != "" && c.releases != nil && c.handsOff() {
			watch = c.releases.watch(k.lock(), o.queueMember)
			defer c.releases.unwatch(watch)
		}
		if err := c.awaitTurn(ctx, err, timer, watch, &o); err != nil {
			return nil, err
		}
	}
}

// prepareAcquire checks an acquisition's key and ttl, settles its options into o, and returns the
// ttl Redis keeps and the keys of the lock: what Acquire and Join share.
func (c *Client) prepareAcquire(key string, ttl time.Duration, o *acquireOptions, opts []AcquireOption) (time.Duration, keys, error) {
	if err := validateKey(key); err != nil {
		return 0, keys{}, err
	}
	// Redis keeps leases in whole milliseconds: count the lease Redis keeps, never a longer one.
	ttl = ttl.Truncate(time.Millisecond)
	if err := validateTTL(ttl); err != nil {
		return 0, keys{}, err
	}
	if err := c.applyAcquireOptions(o, opts); err != nil {
		return 0, keys{}, err
	}
	if o.permits > 0 {
		return ttl, c.keysForPermits(key), nil
	}
	return ttl, c.keysFor(key, o.queueMember != ""), nil
}

// attemptOnce makes one attempt with a new attempt id. When the plain script finds a semaphore it
// changed nothing: the attempt, and every later one, is the semaphore's (k and o say so from then
// on), and the lease still counts from the first script's start.
func (c *Client) attemptOnce(ctx context.Context, key string, k *keys, ttl time.Duration, o *acquireOptions) (*Lock, error) {
	id, err := newAttemptID()
	if err != nil {
		return nil, err
	}
	o.attempt = id
	start := time.Now()
	l, err := c.attemptAcquire(ctx, start, key, *k, ttl, o)
	if errors.Is(err, errSemaphore) {
		o.diverted, *k = true, c.keysForPermits(key)
		l, err = c.attemptAcquire(ctx, start, key, *k, ttl, o)
	}
	return l, err
}

// withContextErr joins ctx's error to err when ctx ended and err does not already say so: a call cut
// off by the caller's deadline fails with the transport's own word (an i/o timeout from the
// connection's deadline), and the caller must still be able to tell that its context ended it.
// The attempt's outcome stays unknown: it is not reported as ErrNotAcquired. The connection's
// deadline is the context's, and its timer can fire a moment before the context's own, so a passed
// deadline counts as ended even while ctx.Err() is still nil.
func withContextErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(dl) {
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		return errors.Join(err, ctxErr)
	}
	return err
}

// awaitTurn waits for the next attempt after notAcquired: until the backoff timer fires, or a
// release frees the lock while we are next in line or hands it to our latest attempt. A release
// message is only a wake-up: anyone who can publish on the channel can send one, so the next attempt
// asks Redis, which re-adopts a lock handed to us and returns its true fence. It returns an error
// only when ctx ends. watch is nil when there is no release channel to listen to.
func (c *Client) awaitTurn(ctx context.Context, notAcquired error, timer *time.Timer, watch *releaseWatch, o *acquireOptions) error {
	var releases <-chan release
	if watch != nil {
		releases = watch.ch
	}
	position := 0
	if qe, ok := errors.AsType[*QueuedError](notAcquired); ok {
		position = qe.Position
	}
	for {
		select {
		case <-ctx.Done():
			return errors.Join(notAcquired, ctx.Err())
		case <-timer.C:
			return nil
		case r := <-releases:
			switch {
			case !r.handedOff && position == 1:
				return nil // freed by a holder that does not hand off: we are next
			case r.handedOff && r.attempt == o.attempt:
				return nil // handed to us, says the message: claim it
			}
			// Not ours, or a handoff to an earlier attempt: the next attempt will tell.
		}
	}
}
