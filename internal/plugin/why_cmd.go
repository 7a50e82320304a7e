package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockedjob/lockedjob/internal/locks"
)

type whyOptions struct {
	output string
	events int
}

func newWhyCommand(s *session) *cobra.Command {
	o := &whyOptions{}
	cmd := &cobra.Command{
		Use:   "why NAME | lockedjob/NAME | job/NAME",
		Short: "Say why a LockedJob or a guarded Job waits, or how it ended, in plain sentences",
		Long: `Explain one LockedJob (NAME, or lockedjob/NAME) or guarded Job (job/NAME: a Job labelled
batch.lockedjob.dev/lock). For a LockedJob: its phase; while it waits, who holds the lock and for how long (for a
semaphore, how many of its permits are in use and each holder's slot), its place in line and the
waiters ahead of it with their priorities (in the order the operator's queue serves them: priority,
then age), or that its Lock declares more permits than the operator's Redlock can grant; while it
runs, its slot of a semaphore, its fencing token and its Job; once finished, how it ended. For a
guarded Job: its guard (waiting, suspended by the admission gate; Held with its fence; Released,
Lost, Unguarded, ScopeNotAllowed) and, while it waits, who holds the lock and the waiters ahead of
it; or what in its label and annotations the operator cannot read. Then its last Events.`,
		Example: `  kubectl lockedjob why migrate-orders
  kubectl lockedjob why migrate-orders -n batch -o json
  kubectl lockedjob why job/migrate`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), s, args[0])
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (sentences by default).")
	cmd.Flags().IntVar(&o.events, "events", 5, "How many of the last Events to show (0 for none).")
	return cmd
}

func (o *whyOptions) run(ctx context.Context, s *session, arg string) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	kind, name, err := parseWhyArg(arg)
	if err != nil {
		return err
	}
	c, err := s.client()
	if err != nil {
		return err
	}
	namespace, err := s.namespace()
	if err != nil {
		return err
	}
	e, warnings, err := explain(ctx, c, kind, client.ObjectKey{Namespace: namespace, Name: name}, o.events)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		say(s.streams.ErrOut, "Warning: %s\n", w)
	}
	if o.output != "" {
		return printStructured(s.streams.Out, o.output, e)
	}
	return e.write(s.streams.Out, s.now())
}

// parseWhyArg reads why's argument as kubectl reads TYPE/NAME: a bare name is a LockedJob.
func parseWhyArg(arg string) (locks.Kind, string, error) {
	kind, name, typed := strings.Cut(arg, "/")
	if !typed {
		return locks.KindLockedJob, arg, nil
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q is not NAME, lockedjob/NAME or job/NAME", arg)
	}
	switch strings.ToLower(kind) {
	case "lockedjob", "lockedjobs", "lj":
		return locks.KindLockedJob, name, nil
	case "job", "jobs":
		return locks.KindJob, name, nil
	}
	return "", "", fmt.Errorf("why explains LockedJobs (NAME or lockedjob/NAME) and guarded Jobs (job/NAME), not %q", kind)
}
