package reconcile

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
)

type testStep int

func (s testStep) String() string { return "step" + strconv.Itoa(int(s)) }

// TestSteps: a pass decides again only while its act says so, never more than max times; the
// last act's result and error are the pass's, but a lost write race is a soon rerun, not an error.
func TestSteps(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "jobs"}, "j", errors.New("stale"))
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		nextUntil int // act says next while the step is below this
		err       error
		errAt     int
		wantActs  int
		wantRes   ctrl.Result
		wantErr   error
	}{
		"one step that ends the pass":     {nextUntil: 0, wantActs: 1, wantRes: ctrl.Result{RequeueAfter: time.Second}},
		"chained steps until one ends":    {nextUntil: 2, wantActs: 3, wantRes: ctrl.Result{RequeueAfter: 3 * time.Second}},
		"bounded by max":                  {nextUntil: 100, wantActs: 4, wantRes: ctrl.Result{RequeueAfter: 4 * time.Second}},
		"an error ends the pass":          {nextUntil: 100, err: boom, errAt: 1, wantActs: 2, wantErr: boom},
		"a conflict is a rerun, no error": {nextUntil: 100, err: conflict, errAt: 0, wantActs: 1, wantRes: ctrl.Result{RequeueAfter: ConflictRequeue}},
	} {
		t.Run(name, func(t *testing.T) {
			var decided, acts int
			res, err := Steps(context.Background(), 4,
				func() testStep { decided++; return testStep(decided - 1) },
				func(_ context.Context, st testStep) (ctrl.Result, bool, error) {
					acts++
					if tc.err != nil && int(st) == tc.errAt {
						return ctrl.Result{}, true, tc.err
					}
					return ctrl.Result{RequeueAfter: time.Duration(acts) * time.Second}, int(st) < tc.nextUntil, nil
				})
			if acts != tc.wantActs || decided != tc.wantActs {
				t.Errorf("acts %d, decisions %d; want %d of each", acts, decided, tc.wantActs)
			}
			if res != tc.wantRes {
				t.Errorf("result %+v, want %+v", res, tc.wantRes)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}
