package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

type waitOptions struct {
	timeout time.Duration
}

func newWaitCommand(s *session) *cobra.Command {
	o := &waitOptions{}
	cmd := &cobra.Command{
		Use:   "wait NAME [--timeout=5m]",
		Short: "Wait until a LockedJob finished; the exit status tells how it ended",
		Long: `Watch a LockedJob until its condition Finished is True and print one line saying how it
ended. Unlike kubectl wait --for=condition=Complete, it returns on a failure too.

Exit status: 0 the LockedJob Succeeded; 1 it ended Failed or LockLost; 2 --timeout passed first;
3 it could not be found, read or watched (or the command was called wrongly).`,
		Example: `  kubectl lockedjob wait migrate-orders --timeout=10m && echo done`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: ExitWaitError, err: fmt.Errorf("wait takes one LockedJob name, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), s, args[0])
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute,
		"How long to wait; 0 checks once without waiting, a negative value waits without limit.")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitWaitError, err: err}
	})
	return cmd
}

// errNotFinished is the answer of a single check (--timeout=0) on a LockedJob still under way.
var errNotFinished = errors.New("not finished")

func (o *waitOptions) run(ctx context.Context, s *session, name string) error {
	c, err := s.client()
	if err != nil {
		return &exitError{code: ExitWaitError, err: err}
	}
	namespace, err := s.namespace()
	if err != nil {
		return &exitError{code: ExitWaitError, err: err}
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	lj, err := waitFinished(ctx, c, key, o.timeout == 0)
	if errors.Is(err, errNotFinished) || errors.Is(err, context.DeadlineExceeded) {
		return &exitError{code: ExitTimeout, err: fmt.Errorf("timed out after %s waiting for lockedjob/%s to finish (%s)", o.timeout, name, phaseOf(lj))}
	}
	if err != nil {
		return &exitError{code: ExitWaitError, err: err}
	}
	c0 := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionFinished)
	if _, err := fmt.Fprintf(s.streams.Out, "lockedjob/%s %s (%s): %s\n", name, lj.Status.Phase, c0.Reason, c0.Message); err != nil {
		return &exitError{code: ExitWaitError, err: err}
	}
	if lj.Status.Phase != batchv1alpha1.PhaseSucceeded {
		return &exitError{code: ExitError}
	}
	return nil
}

// phaseOf says where a LockedJob that has not finished stands, for the timeout message.
func phaseOf(lj *batchv1alpha1.LockedJob) string {
	if lj == nil || lj.Status.Phase == "" {
		return "not yet reconciled"
	}
	if lj.Status.Message == "" {
		return "phase " + string(lj.Status.Phase)
	}
	return fmt.Sprintf("phase %s: %s", lj.Status.Phase, lj.Status.Message)
}

// finished reports condition Finished True, which the operator sets at any end.
func finished(lj *batchv1alpha1.LockedJob) bool {
	return meta.IsStatusConditionTrue(lj.Status.Conditions, batchv1alpha1.ConditionFinished)
}

// waitFinished returns the LockedJob once condition Finished is True. It watches from the version
// it read, and reads again whenever the watch ends (API servers close watches after a while, and a
// version too old to watch from answers 410 Gone), so no change is missed. On ctx's end it returns
// the last version seen with ctx's error. once makes it check without waiting (errNotFinished).
func waitFinished(ctx context.Context, c client.WithWatch, key client.ObjectKey, once bool) (*batchv1alpha1.LockedJob, error) {
	var last *batchv1alpha1.LockedJob
	for {
		lj := &batchv1alpha1.LockedJob{}
		if err := c.Get(ctx, key, lj); err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("lockedjob %q not found in namespace %s", key.Name, key.Namespace)
			}
			return nil, fmt.Errorf("get lockedjob %s: %w", key.Name, err)
		}
		last = lj
		if finished(lj) {
			return lj, nil
		}
		if once {
			return lj, errNotFinished
		}
		err := watchUntilFinished(ctx, c, &last)
		switch {
		case ctx.Err() != nil:
			return last, ctx.Err()
		case err != nil:
			return nil, err
		case finished(last):
			return last, nil
		}
	}
}

// watchUntilFinished watches *last from its resourceVersion and keeps *last the newest version
// seen. It returns nil once that version is finished, and also when the watch ended and must be
// started again from a fresh read.
func watchUntilFinished(ctx context.Context, c client.WithWatch, last **batchv1alpha1.LockedJob) error {
	lj := *last
	w, err := c.Watch(ctx, &batchv1alpha1.LockedJobList{}, &client.ListOptions{
		Namespace:     lj.Namespace,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", lj.Name),
		Raw:           &metav1.ListOptions{ResourceVersion: lj.ResourceVersion},
	})
	if err != nil {
		return fmt.Errorf("watch lockedjob %s: %w", lj.Name, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Deleted:
				return fmt.Errorf("lockedjob %s was deleted before it finished", lj.Name)
			case watch.Error:
				// 410 Gone: the version is too old to watch from; a fresh read answers.
				if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return nil
				}
				return fmt.Errorf("watch lockedjob %s: %w", lj.Name, apierrors.FromObject(ev.Object))
			case watch.Added, watch.Modified:
				got, ok := ev.Object.(*batchv1alpha1.LockedJob)
				if !ok || got.UID != lj.UID {
					continue
				}
				*last = got
				if finished(got) {
					return nil
				}
			}
		}
	}
}
