package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Values of --dry-run, as kubectl has them.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

type runOptions struct {
	lock           string
	image          string
	ttl            time.Duration
	acquireTimeout time.Duration
	priority       int32
	scope          string
	onLockLost     string
	dryRun         string
	output         string
}

func newRunCommand(s *session) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run NAME --lock LOCK --image IMAGE [flags] [-- COMMAND [ARGS...]]",
		Short: "Create a LockedJob that runs one container, like kubectl create job",
		Long: `Create a LockedJob named NAME whose Job runs one container (named NAME) from IMAGE, with
COMMAND and ARGS as its command when given, under the lock LOCK. The pod's restartPolicy is Never;
fields not given take the API's defaults (ttl 30s, scope Namespace, onLockLost Suspend).`,
		Example: `  kubectl lockedjob run migrate-orders --lock nightly-migration --image busybox -- sh -c 'echo $LOCKEDJOB_FENCING_TOKEN'
  kubectl lockedjob run report --lock reports --image busybox --priority 10 --ttl 1m --dry-run=client -o yaml -- date`,
		RunE: func(cmd *cobra.Command, args []string) error {
			names := args
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				names = args[:dash]
			}
			if len(names) != 1 {
				return fmt.Errorf("run takes one NAME before --, got %d (%v); put the command after --", len(names), names)
			}
			return o.run(cmd.Context(), s, args[0], args[1:])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.lock, "lock", "", "Name of the lock (spec.lock.name). Required.")
	f.StringVar(&o.image, "image", "", "Image of the container. Required.")
	f.DurationVar(&o.ttl, "ttl", 0, "Lease of the lock in Redis (spec.lock.ttl), e.g. 30s; the API's default when not given.")
	f.DurationVar(&o.acquireTimeout, "acquire-timeout", 0, "Give up waiting for the lock after this long (spec.lock.acquireTimeout); no limit when not given.")
	f.Int32Var(&o.priority, "priority", 0, "Priority among the waiters of the lock, -1000 to 1000; higher is served first (spec.lock.priority).")
	f.StringVar(&o.scope, "scope", "", "Scope of the lock name: Namespace or Cluster (spec.lock.scope); the API's default (Namespace) when not given.")
	f.StringVar(&o.onLockLost, "on-lock-lost", "", "What happens to the Job if the lock is lost: Suspend, Delete or Ignore (spec.lock.onLockLost).")
	f.StringVar(&o.dryRun, "dry-run", dryRunNone, "none, client (print the object, send nothing) or server (the API server validates it, nothing is stored).")
	f.Lookup("dry-run").NoOptDefVal = dryRunClient
	f.StringVarP(&o.output, "output", "o", "", "Print the LockedJob as json or yaml instead of one line.")
	return cmd
}

func (o *runOptions) validate() error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	switch {
	case o.lock == "":
		return fmt.Errorf("--lock is required")
	case o.image == "":
		return fmt.Errorf("--image is required")
	case o.ttl < 0 || o.acquireTimeout < 0:
		return fmt.Errorf("--ttl and --acquire-timeout must be positive")
	}
	switch o.dryRun {
	case dryRunNone, dryRunClient, dryRunServer:
	default:
		return fmt.Errorf("--dry-run must be none, client or server, not %q", o.dryRun)
	}
	switch batchv1alpha1.LockScope(o.scope) {
	case "", batchv1alpha1.LockScopeNamespace, batchv1alpha1.LockScopeCluster:
	default:
		return fmt.Errorf("--scope must be Namespace or Cluster, not %q", o.scope)
	}
	switch batchv1alpha1.LockLostPolicy(o.onLockLost) {
	case "", batchv1alpha1.LockLostSuspend, batchv1alpha1.LockLostDelete, batchv1alpha1.LockLostIgnore:
	default:
		return fmt.Errorf("--on-lock-lost must be Suspend, Delete or Ignore, not %q", o.onLockLost)
	}
	return nil
}

func (o *runOptions) run(ctx context.Context, s *session, name string, command []string) error {
	if err := o.validate(); err != nil {
		return err
	}
	namespace, err := s.namespace()
	if err != nil {
		return err
	}
	lj := o.lockedJob(namespace, name, command)
	if o.dryRun != dryRunClient {
		c, err := s.client()
		if err != nil {
			return err
		}
		var opts []client.CreateOption
		if o.dryRun == dryRunServer {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Create(ctx, lj, opts...); err != nil {
			return fmt.Errorf("create lockedjob %s: %w", name, err)
		}
		// The client clears TypeMeta on decode; the printed object should say what it is.
		lj.APIVersion, lj.Kind = batchv1alpha1.GroupVersion.String(), kindLockedJob
	}
	if o.output != "" {
		return printStructured(s.streams.Out, o.output, lj)
	}
	suffix := ""
	switch o.dryRun {
	case dryRunClient:
		suffix = " (dry run)"
	case dryRunServer:
		suffix = " (server dry run)"
	}
	_, err = fmt.Fprintf(s.streams.Out, "lockedjob.%s/%s created%s\n", batchv1alpha1.GroupVersion.Group, name, suffix)
	return err
}

// lockedJob builds the LockedJob as kubectl create job builds a Job: one container named after it.
func (o *runOptions) lockedJob(namespace, name string, command []string) *batchv1alpha1.LockedJob {
	lj := &batchv1alpha1.LockedJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: kindLockedJob},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{
				Name:       o.lock,
				Scope:      batchv1alpha1.LockScope(o.scope),
				Priority:   o.priority,
				OnLockLost: batchv1alpha1.LockLostPolicy(o.onLockLost),
			},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: name, Image: o.image, Command: command}},
			}}}},
		},
	}
	if o.ttl > 0 {
		lj.Spec.Lock.TTL = &metav1.Duration{Duration: o.ttl}
	}
	if o.acquireTimeout > 0 {
		lj.Spec.Lock.AcquireTimeout = &metav1.Duration{Duration: o.acquireTimeout}
	}
	return lj
}
