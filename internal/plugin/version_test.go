package plugin

import (
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/lockedjob/lockedjob/internal/version"
)

// TestVersionCommand prints the build's line and needs no cluster (no kubeconfig is read).
func TestVersionCommand(t *testing.T) {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	t.Setenv("KUBECONFIG", "/nonexistent")
	if code := run(streams, []string{"version"}, time.Now); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if want := "kubectl-lockedjob " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	if !strings.Contains(out.String(), "commit ") {
		t.Errorf("no commit in %q", out.String())
	}
}
