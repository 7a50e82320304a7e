// Package campaign keeps a process in the leader election after it lost its leadership.
//
// controller-runtime's manager stops for good when its leader lease is lost, and most operators
// exit then. lockedjob must not: its lock book renews the locks of running Jobs, and a restart
// longer than a lock's ttl turns every held lock into LockLost. So the process keeps its book and
// builds a new manager, which campaigns again, until the process is told to stop.
package campaign

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// Manager is what Run starts: a controller-runtime manager, started once.
type Manager interface {
	Start(ctx context.Context) error
}

// Run builds a manager with build and starts it until ctx ends. A manager that stops because it
// lost its leadership is replaced: after pause, build makes the next one, which campaigns again.
// Run returns nil when ctx ends, and any other error of build or of a manager as it is: a failure
// that is not a lost election is the operator's to report, not to hide in a loop.
func Run(ctx context.Context, build func() (Manager, error), pause time.Duration, log logr.Logger) error {
	for term := 1; ; term++ {
		mgr, err := build()
		if err != nil {
			return fmt.Errorf("build manager %d: %w", term, err)
		}
		err = mgr.Start(ctx)
		switch {
		case !LostLeadership(err):
			return err
		case ctx.Err() != nil:
			return nil // the process stops anyway: leadership no longer matters
		}
		log.Info("Lost leadership; campaigning again with a new manager while the held locks keep renewing",
			"term", term, "reason", err.Error(), "pause", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// LostLeadership reports whether a manager ended because its leader lease was lost.
// controller-runtime (v0.25, pkg/manager/internal.go) says so only in words: its
// OnStoppedLeading sends errors.New("leader election lost"), which Start returns, possibly
// aggregated with errors of the stop. cmd/manager's TestLeadershipLostCampaignsAgain pins the words
// against the real manager.
func LostLeadership(err error) bool {
	return err != nil && strings.Contains(err.Error(), "leader election lost")
}
