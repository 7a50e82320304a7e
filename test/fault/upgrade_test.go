//go:build fault

package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// previousRelease is the commit whose operator the upgrade scenarios start from and go back to:
// the last main that landed green before these scenarios. Move it forward when a release is cut;
// the upgrade that matters is the one from what users run.
const previousRelease = "6b0d4fdd418a4a05a990ad20bbd5f0962861bf26"

// upgradeHolderRun is how long the holder's pod runs: past three restarts of ~0.5 s each, with
// room for a loaded machine (the scenario fails if the pod ended first).
const upgradeHolderRun = 12 * time.Second

var previousBuild struct {
	once sync.Once
	bin  string
	err  error
}

// previousManager builds the previous release's manager once: its tree from this clone's history
// (git archive; a shallow clone lacks it and says so), its own go.mod, the same module cache. The
// suite builds it right after this commit's manager, both with -trimpath, so every package the two
// share comes from the build cache.
func previousManager() (string, error) {
	b := &previousBuild
	b.once.Do(func() {
		t0 := time.Now()
		dir := filepath.Join(env.work, "previous-release")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.err = err
			return
		}
		archive := exec.Command("bash", "-o", "pipefail", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`,
			"archive", env.root, previousRelease, dir)
		if out, err := utils.Run(archive); err != nil {
			b.err = fmt.Errorf("the previous release %.12s is not in this clone's history (a shallow clone?): %w\n%s",
				previousRelease, err, out)
			return
		}
		b.bin = filepath.Join(env.work, "manager-previous")
		build := exec.Command("go", "build", "-trimpath", "-o", b.bin, "./cmd/manager")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := utils.Run(build); err != nil {
			b.err = fmt.Errorf("build the previous release's manager: %w\n%s", err, out)
			return
		}
		logf("built the previous release's manager (%.12s) in %s", previousRelease, since(t0))
	})
	return b.bin, b.err
}

// upgrade runs the cast's holder under the previous release's operator a, then, while the
// holder's pod runs, upgrades operator a to this commit's, downgrades it back and upgrades it
// again: each a graceful restart on the other binary, as a Deployment's rollout stops the old pod
// and its successor leads. Every new process must re-adopt the held lock: one unbroken lease, no
// LockLost, no second Job; b1 waits throughout and runs after. Operator a ends on this commit's
// binary, for the scenarios after.
func upgrade(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		prev, err := previousManager()
		if err != nil {
			return time.Time{}, err
		}
		o := env.operators["a"]
		defer func() {
			// A scenario that failed half-way leaves operator a on this commit's binary too.
			if o.procs.Bin != env.managerBin {
				if err := runOn(o, env.managerBin, "this commit (restored)", false); err != nil {
					logf("%s: %v", r.sc.name, err)
				}
			}
		}()
		if err := runOn(o, prev, "the previous release", false); err != nil {
			return time.Time{}, err
		}
		if err := k.setUp(r, upgradeHolderRun, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		r.faultAt = time.Now()
		for _, step := range []struct{ bin, what string }{
			{env.managerBin, "this commit (upgrade)"},
			{prev, "the previous release (downgrade)"},
			{env.managerBin, "this commit (upgrade again)"},
		} {
			if err := runOn(o, step.bin, step.what, true); err != nil {
				return time.Time{}, err
			}
		}
		if a := env.clusters["a"]; a.runningPods(r.ns, k.claimant) == 0 {
			return time.Time{}, errors.New("the holder's pod ended before the last upgrade: make it run longer")
		}
		return time.Now(), nil
	}
}

// runOn restarts operator o gracefully on bin and waits until it leads and, with readopt, until it
// re-adopted the lock its predecessor held, so the next restart meets a lock the new process holds.
func runOn(o *operator, bin, what string, readopt bool) error {
	t0, m := time.Now(), o.mark()
	o.procs.Bin = bin
	if err := o.restart(o.mode); err != nil {
		return fmt.Errorf("operator a on %s: %w", what, err)
	}
	if !readopt {
		logf("operator a runs %s, leading %s after the restart began", what, since(t0))
		return nil
	}
	led := since(t0)
	if err := poll(30*time.Second, func() (bool, string) {
		return strings.Contains(o.logSince(m), "Re-adopted lock"), "operator a on " + what + " has not re-adopted the lock"
	}); err != nil {
		return err
	}
	logf("operator a runs %s: leading %s, re-adopted %s after the restart began", what, led, since(t0))
	return nil
}

// survivedUpgrades judges upgrade: the holder kept one unbroken lease through the three restarts
// and ended as if nothing happened, every process re-adopted its lock (three Readopted), and every
// claimant ended unbroken (the checker counts the Jobs).
func survivedUpgrades(k cast) func(r *run, h history) []string {
	return func(r *run, h history) []string {
		fails := unbrokenLease(r, h, holder("a", r.ns, k.claimant))
		if n := strings.Count(env.operators["a"].logSince(r.marks["a"]), "Re-adopted lock"); n < 3 {
			fails = append(fails, fmt.Sprintf("operator a logged %d re-adoptions, want one per restart (3)", n))
		}
		for _, c := range h.Claimants {
			if !c.claimsUnbroken() {
				fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded or Released", c.holder(), c.Phase, c.Message))
			}
		}
		return fails
	}
}
