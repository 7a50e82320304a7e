package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/lockedjob/lockedjob/internal/locks"
)

// Output formats of -o. Empty is the human form (a table, or sentences).
const (
	outputJSON = "json"
	outputYAML = "yaml"
)

// none fills an empty table cell, as kubectl does.
const none = "<none>"

// kindLockedJob is the kind the plugin reads and creates.
const kindLockedJob = "LockedJob"

// writeTable aligns rows of tab-separated cells as kubectl aligns its tables, and writes them.
func writeTable(out io.Writer, rows string) error {
	w := printers.GetNewTabWriter(out)
	if _, err := io.WriteString(w, rows); err != nil {
		return err
	}
	return w.Flush()
}

// checkOutput refuses an -o value the command does not know before anything is read or written.
func checkOutput(format string) error {
	switch format {
	case "", outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o json or -o yaml", format)
}

// printStructured writes v as JSON or YAML: the same data the human form shows, with absolute times
// instead of ages, for scripts.
func printStructured(out io.Writer, format string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Messages quote the operator ("position >3 in queue"): no \u003e in a terminal.
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	b := buf.Bytes()
	if format == outputYAML {
		var err error
		if b, err = yaml.JSONToYAML(b); err != nil {
			return fmt.Errorf("encode output as yaml: %w", err)
		}
	}
	_, err := out.Write(b)
	return err
}

// since is how long ago t was, as kubectl prints ages ("3m12s", "2d"), or none.
func since(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// ref names a LockedJob (kind LockedJob, or none) or a guarded Job (kind Job) the short way where
// its namespace goes without saying: a LockedJob by its name, as `why NAME` takes it, a guarded Job
// as kubectl names a Job, job/NAME, which `why job/NAME` takes.
func ref(kind locks.Kind, namespace, name string, withNamespace bool) string {
	if kind == locks.KindJob {
		name = "job/" + name
	}
	if withNamespace {
		return namespace + "/" + name
	}
	return name
}
