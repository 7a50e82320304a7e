package plugin

import (
	"context"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type whyOptions struct {
	output string
	events int
}

func newWhyCommand(s *session) *cobra.Command {
	o := &whyOptions{}
	cmd := &cobra.Command{
		Use:   "why NAME",
		Short: "Say why a LockedJob waits, or how it ended, in plain sentences",
		Long: `Explain one LockedJob: its phase; while it waits, who holds the lock and for how long (for a
semaphore, how many of its permits are in use and each holder's slot), its place in line and the
waiters ahead of it with their priorities (in the order the operator's queue serves them: priority,
then age), or that its Lock declares more permits than the operator's Redlock can grant; while it
runs, its slot of a semaphore, its fencing token and its Job; once finished, how it ended. Then its
last Events.`,
		Example: `  kubectl lockedjob why migrate-orders
  kubectl lockedjob why migrate-orders -n batch -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), s, args[0])
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (sentences by default).")
	cmd.Flags().IntVar(&o.events, "events", 5, "How many of the last Events to show (0 for none).")
	return cmd
}

func (o *whyOptions) run(ctx context.Context, s *session, name string) error {
	if err := checkOutput(o.output); err != nil {
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
	e, warnings, err := explain(ctx, c, client.ObjectKey{Namespace: namespace, Name: name}, o.events)
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
