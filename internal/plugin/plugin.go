// Package plugin holds the commands of the kubectl plugin `kubectl lockedjob` (cmd/kubectl-lockedjob):
// locks, why, wait and run. The plugin reads and writes only the Kubernetes API (LockedJobs, their
// Events and Jobs): its users need no access to Redis, and it never shows a lock token (LockedJob
// status has none).
package plugin

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Exit codes of the plugin. Every command exits ExitError on an error; wait tells its outcomes
// apart from errors, so a script can tell "the Job failed" from "the API server was unreachable".
const (
	// ExitOK: the command did what it was asked; for wait, the LockedJob Succeeded.
	ExitOK = 0
	// ExitError: the command failed (bad flags, not found, API errors); for wait, the LockedJob
	// ended Failed or LockLost.
	ExitError = 1
	// ExitTimeout: wait gave up after --timeout before the LockedJob finished.
	ExitTimeout = 2
	// ExitWaitError: wait could not find, read or watch the LockedJob (or was called wrongly).
	ExitWaitError = 3
)

// exitError carries an exit code other than ExitError. A nil err means the command has already
// said what there was to say.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
}

// Run runs the plugin with args (without the program name) and returns its exit code. Errors go to
// streams.ErrOut.
func Run(streams genericiooptions.IOStreams, args []string) int {
	return run(streams, args, time.Now)
}

// run is Run with an injected clock, so tests can compare durations ("held for 3m") exactly.
func run(streams genericiooptions.IOStreams, args []string, now func() time.Time) int {
	cmd := newRootCommand(&session{streams: streams, now: now})
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		if ee.err != nil {
			say(streams.ErrOut, "error: %v\n", ee.err)
		}
		return ee.code
	}
	say(streams.ErrOut, "error: %v\n", err)
	return ExitError
}

// say writes a line to stderr. A failed write there has nowhere left to be reported.
func say(errOut io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(errOut, format, args...)
}

// session is what every command shares: the kubectl connection flags, the streams and the clock.
type session struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	now     func() time.Time
}

// client builds a client for the cluster the kubectl flags (and kubeconfig) name.
func (s *session) client() (client.WithWatch, error) {
	cfg, err := s.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	return c, nil
}

// namespace is the namespace of --namespace, else the kubeconfig context's, else "default".
func (s *session) namespace() (string, error) {
	ns, _, err := s.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

func newRootCommand(s *session) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-lockedjob",
		Short: "Look at lockedjob's locks and LockedJobs, wait for them, create them",
		Long: `kubectl lockedjob shows what lockedjob's operator records in the Kubernetes API: who holds
each lock and who waits (locks), why one LockedJob waits or how it ended (why); it waits until a
LockedJob finished (wait) and creates one from the command line (run). It needs no access to Redis.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// kubectl runs a plugin as kubectl-lockedjob; the help should read as the user typed it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl lockedjob"},
	}
	s.flags = genericclioptions.NewConfigFlags(true)
	s.flags.AddFlags(cmd.PersistentFlags())
	cmd.SetOut(s.streams.Out)
	cmd.SetErr(s.streams.ErrOut)
	cmd.SetIn(s.streams.In)
	cmd.AddCommand(newLocksCommand(s), newWhyCommand(s), newWaitCommand(s), newRunCommand(s), newVersionCommand(s))
	return cmd
}
