package campaign

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
)

// fakeManager ends its Start with end, or with nil when ctx ends first (end == nil).
type fakeManager struct {
	end     error
	started chan struct{}
}

func (m *fakeManager) Start(ctx context.Context) error {
	close(m.started)
	if m.end != nil {
		return m.end
	}
	<-ctx.Done()
	return nil
}

func TestRun(t *testing.T) {
	lost := errors.New("leader election lost")
	broken := errors.New("failed to start caches")
	cases := map[string]struct {
		ends      []error // what each manager's Start returns, in order; nil waits for the context
		wantBuilt int
		wantErr   error
	}{
		"a lost election builds a new manager, which runs until the process stops": {
			ends: []error{lost, lost, nil}, wantBuilt: 3,
		},
		"the lost election may come aggregated with errors of the stop": {
			ends: []error{kerrors.NewAggregate([]error{lost, errors.New("stop timed out")}), nil}, wantBuilt: 2,
		},
		"any other failure ends Run with it": {
			ends: []error{lost, broken}, wantBuilt: 2, wantErr: broken,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var built []*fakeManager
			build := func() (Manager, error) {
				m := &fakeManager{end: tc.ends[len(built)], started: make(chan struct{})}
				built = append(built, m)
				if m.end == nil {
					go func() { <-m.started; cancel() }() // SIGTERM once the last manager runs
				}
				return m, nil
			}
			err := Run(ctx, build, time.Millisecond, logr.Discard())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run = %v, want %v", err, tc.wantErr)
			}
			if len(built) != tc.wantBuilt {
				t.Fatalf("built %d managers, want %d", len(built), tc.wantBuilt)
			}
		})
	}
}

// TestRunStopsDuringThePause: a stop that comes between two managers ends Run without building
// another.
func TestRunStopsDuringThePause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	built := 0
	build := func() (Manager, error) {
		built++
		cancel()
		return &fakeManager{end: errors.New("leader election lost"), started: make(chan struct{})}, nil
	}
	if err := Run(ctx, build, time.Hour, logr.Discard()); err != nil {
		t.Fatalf("Run = %v, want nil after the stop", err)
	}
	if built != 1 {
		t.Fatalf("built %d managers after the stop, want 1", built)
	}
}

func TestRunReportsABuildFailure(t *testing.T) {
	bad := errors.New("no config")
	build := func() (Manager, error) { return nil, bad }
	if err := Run(context.Background(), build, time.Millisecond, logr.Discard()); !errors.Is(err, bad) {
		t.Fatalf("Run = %v, want the build error", err)
	}
}
