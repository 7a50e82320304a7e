package model

import "testing"

// semaphoreBounds: two acquisitions per client, two edits of the Lock (raise, lower or delete).
var semaphoreBounds = SemaphoreConfig{Rounds: 2, Edits: 2}

func TestSemaphoreAsBuilt(t *testing.T) {
	expect(t, SemaphoreInit(), SemaphoreNext(semaphoreBounds), SemaphoreCheck, "")
}

func TestSemaphoreMutations(t *testing.T) {
	for name, m := range map[string]SemaphoreMutation{
		"every acquisition stores its N (issue 23)":        StoreCallerPermits,
		"the permits retired while a slot above 0 is held": RetireWhileHeldAbove,
		"a plain caller not sent on to the semaphore":      PlainIgnoresPermits,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := semaphoreBounds
			cfg.Mutation = m
			expect(t, SemaphoreInit(), SemaphoreNext(cfg), SemaphoreCheck, "e")
		})
	}
}
