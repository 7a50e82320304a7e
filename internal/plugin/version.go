package plugin

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lockedjob/lockedjob/internal/version"
)

// newVersionCommand prints the plugin's build (internal/version): what to quote in a bug report,
// and how to tell that a krew install is the release it should be. It needs no cluster.
func newVersionCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(s.streams.Out, "kubectl-lockedjob "+version.Get().String())
			return err
		},
	}
}
