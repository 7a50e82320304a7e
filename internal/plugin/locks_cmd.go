package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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
		Short: "List locks: permits in use, holders, how long they have held, waiters, the head of the queue, the last handoff",
		Long: `List the locks the LockedJobs and guarded Jobs (Jobs labelled batch.lockedjob.dev/lock) of a
namespace (or of all, with -A) run under, one row per lock: how many of its permits are in use (a
semaphore, declared by a Lock's spec.permits, admits several holders), who holds it (a LockedJob by
name, a guarded Job as job/NAME; slot of a semaphore and fencing token), for how long, how many
wait, who is next, and the last handoff. It is derived from the LockedJobs' status and the guarded
Jobs' annotations, which the operator writes on every change, or from a declared Lock's status when
that is fresher; a Cluster-scoped lock shows its LockedJobs and guarded Jobs in every namespace you
may list.`,
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
			say(s.streams.ErrOut, "No LockedJobs or guarded Jobs found.\n")
		} else {
			say(s.streams.ErrOut, "No LockedJobs or guarded Jobs found in namespace %s.\n", namespace)
		}
		return nil
	}
	return printLocksTable(s, views)
}

func printLocksTable(s *session, views []LockView) error {
	now := s.now()
	var rows strings.Builder
	rows.WriteString("LOCK\tSCOPE\tNAMESPACE\tIN USE\tHOLDERS\tHELD FOR\tWAITING\tHEAD\tLAST HANDOFF\n")
	for _, v := range views {
		cluster := v.Scope == batchv1alpha1.LockScopeCluster
		holders, heldFor := holdersCells(&v, cluster, now)
		head := none
		switch {
		case v.Head == nil:
		case v.Head.Name == "":
			head = v.Head.Identity
		default:
			head = ref(v.Head.Kind, v.Head.Namespace, v.Head.Name, cluster)
		}
		handoff := none
		if h := v.LastHandoff; h != nil {
			handoff = fmt.Sprintf("%s ago (%s -> %s)", since(now, &h.AcquiredAt),
				ref(h.From.Kind, h.From.Namespace, h.From.Name, cluster), ref(h.To.Kind, h.To.Namespace, h.To.Name, cluster))
		}
		fmt.Fprintf(&rows, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%d\t%s\t%s\n",
			v.Lock, v.Scope, v.Namespace, v.InUse, v.Permits, holders, heldFor, v.Waiting, head, handoff)
	}
	return writeTable(s.streams.Out, rows.String())
}

// holdersCells are the HOLDERS and HELD FOR cells: the holders in slot order, and how long each has
// held the lock in the same order, comma-separated as kubectl prints a column of several values
// (kubectl get endpoints, ingress hosts).
func holdersCells(v *LockView, withNamespace bool, now time.Time) (holders, heldFor string) {
	if len(v.Holders) == 0 {
		return none, none
	}
	semaphore := v.semaphore()
	names := make([]string, len(v.Holders))
	ages := make([]string, len(v.Holders))
	for i := range v.Holders {
		names[i] = holderCell(&v.Holders[i], withNamespace, semaphore)
		ages[i] = since(now, v.Holders[i].AcquiredAt)
	}
	if !slices.ContainsFunc(ages, func(age string) bool { return age != none }) {
		return strings.Join(names, ", "), none
	}
	return strings.Join(names, ", "), strings.Join(ages, ", ")
}

// holderCell is "name (fence N)", or for a semaphore "name (slot S, fence N)". A holder known only
// by its name in Redis shows that name, with its slot and fence for a semaphore, where they tell
// its holders apart.
func holderCell(h *Holder, withNamespace, semaphore bool) string {
	var about []string
	if semaphore && h.Slot != nil {
		about = append(about, fmt.Sprintf("slot %d", *h.Slot))
	}
	if h.FencingToken != nil && (h.Name != "" || semaphore) {
		about = append(about, fmt.Sprintf("fence %d", *h.FencingToken))
	}
	cell := h.Identity
	if h.Name != "" {
		cell = ref(h.Kind, h.Namespace, h.Name, withNamespace)
	}
	if len(about) == 0 {
		return cell
	}
	return cell + " (" + strings.Join(about, ", ") + ")"
}
