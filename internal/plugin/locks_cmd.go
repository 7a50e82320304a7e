package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

type locksOptions struct {
	allNamespaces bool
	output        string
}

func newLocksCommand(s *session) *cobra.Command {
	o := &locksOptions{}
	cmd := &cobra.Command{
		Use:   "locks [-A]",
		Short: "List locks: holder, how long it has held, waiters, the head of the queue, the last handoff",
		Long: `List the locks the LockedJobs of a namespace (or of all, with -A) run under, one row per lock:
who holds it (name and fencing token), for how long, how many wait, who is next, and the last
handoff. It is derived from the LockedJobs' status, which the operator writes on every change; a
Cluster-scoped lock shows its LockedJobs in every namespace you may list.`,
		Example: `  kubectl lockedjob locks
  kubectl lockedjob locks -A -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), s)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List the locks of every namespace.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (the table by default).")
	return cmd
}

func (o *locksOptions) run(ctx context.Context, s *session) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	c, err := s.client()
	if err != nil {
		return err
	}
	namespace := ""
	if !o.allNamespaces {
		if namespace, err = s.namespace(); err != nil {
			return err
		}
	}
	views, warnings, err := listLocks(ctx, c, namespace)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		say(s.streams.ErrOut, "Warning: %s\n", w)
	}
	if o.output != "" {
		return printStructured(s.streams.Out, o.output, struct {
			Items []LockView `json:"items"`
		}{Items: views})
	}
	if len(views) == 0 {
		if o.allNamespaces {
			say(s.streams.ErrOut, "No LockedJobs found.\n")
		} else {
			say(s.streams.ErrOut, "No LockedJobs found in namespace %s.\n", namespace)
		}
		return nil
	}
	return printLocksTable(s, views)
}

func printLocksTable(s *session, views []LockView) error {
	now := s.now()
	var rows strings.Builder
	rows.WriteString("LOCK\tSCOPE\tNAMESPACE\tHOLDER\tHELD FOR\tWAITING\tHEAD\tLAST HANDOFF\n")
	for _, v := range views {
		cluster := v.Scope == batchv1alpha1.LockScopeCluster
		holder, heldFor := none, none
		if h := v.Holder; h != nil {
			holder, heldFor = holderCell(h, cluster), since(now, h.AcquiredAt)
		}
		head := none
		switch {
		case v.Head == nil:
		case v.Head.Name == "":
			head = v.Head.Identity
		default:
			head = ref(v.Head.Namespace, v.Head.Name, cluster)
		}
		handoff := none
		if h := v.LastHandoff; h != nil {
			handoff = fmt.Sprintf("%s ago (%s -> %s)", since(now, &h.AcquiredAt),
				ref(h.From.Namespace, h.From.Name, cluster), ref(h.To.Namespace, h.To.Name, cluster))
		}
		fmt.Fprintf(&rows, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Lock, v.Scope, v.Namespace, holder, heldFor, v.Waiting, head, handoff)
	}
	return writeTable(s.streams.Out, rows.String())
}

// holderCell is "name (fence N)"; a holder known only by its name in Redis shows that name.
func holderCell(h *Holder, withNamespace bool) string {
	if h.Name == "" {
		return h.Identity
	}
	cell := ref(h.Namespace, h.Name, withNamespace)
	if h.FencingToken != nil {
		cell += fmt.Sprintf(" (fence %d)", *h.FencingToken)
	}
	return cell
}
