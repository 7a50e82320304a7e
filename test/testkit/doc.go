// Package testkit is what the end-to-end suite (test/e2e) and the fault suite (test/fault) share:
// the launcher of the manager as a local process (Launcher, Process, Flags), the recorder that
// stamps every Job and pod transition with the test's clock (Recorder, History), and the builders
// of the LockedJobs both suites run and of guarded Jobs that run the same pod (NewLockedJob,
// NewGuardedJob).
//
// It has no build tag, so `make test-unit` runs its own tests, and no Ginkgo or Gomega: it returns
// errors, and each suite asserts them in its own style (Gomega in e2e, t.Fatal in fault). What a
// suite chooses (its flags, its lease timing, the namespaces it records, its pods' label) is a
// field here, not a copy there.
package testkit
