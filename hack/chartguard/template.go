package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	// namePrefix and namespace are config/default's (namePrefix, namespace); the chart names
	// objects by the release instead, as the plugin's templates do.
	namePrefix = "lockedjob-"
	namespace  = "lockedjob-system"
	appName    = "lockedjob"

	// webhookDir is the folder of templates/ this step owns: what only the webhook path renders.
	webhookDir = "guard-webhook"
	// isWebhook is the condition of the webhook path, defined in helpersFile.
	isWebhook  = `include "lockedjob.guardWebhook" $`
	helperName = "_guard.tpl"
	// generatedBy opens every template this step writes or wraps.
	generatedBy = `{{- /* guard.admission (hack/chartguard, make helm-chart): `
)

// helpers defines lockedjob.guardWebhook: "true" on the webhook path, empty on the policy path,
// and a failed render for any other value, so a typo never installs no gate at all.
const helpers = generatedBy + `the path of the admission gate. */}}
{{- define "lockedjob.guardWebhook" -}}
{{- $admission := .Values.guard.admission | default "policy" -}}
{{- if eq $admission "webhook" -}}
true
{{- else if ne $admission "policy" -}}
{{- fail (printf "guard.admission must be policy or webhook, not %q" $admission) -}}
{{- end -}}
{{- end }}
`

// wrapPolicyOnly wraps the plugin's template of o, an object only the policy path has, so that it
// renders only there. The plugin names such a template extras/<name without the prefix>.yaml.
func wrapPolicyOnly(templates string, o *unstructured.Unstructured) error {
	suffix, ok := strings.CutPrefix(o.GetName(), namePrefix)
	if !ok {
		return fmt.Errorf("%s: name without the prefix %s", keyOf(o), namePrefix)
	}
	path := filepath.Join(templates, "extras", suffix+".yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the template of %s: %w", keyOf(o), err)
	}
	content := string(raw)
	if strings.HasPrefix(content, generatedBy) {
		return nil // wrapped by an earlier run on the same plugin output
	}
	if !strings.Contains(content, "\nkind: "+o.GetKind()+"\n") || !strings.Contains(content, resourceName(suffix)) {
		return fmt.Errorf("%s does not hold %s: did the plugin change how it names templates?", path, keyOf(o))
	}
	return writeFile(path, generatedBy+"the policy path only. */}}\n{{- if not ("+isWebhook+") }}\n"+content+"{{- end }}\n")
}

// writeWebhookObjects writes one template per object only the webhook path has into
// templates/guard-webhook, with the helpers, and removes whatever else is there.
func writeWebhookObjects(templates string, objs []*unstructured.Unstructured) error {
	dir := filepath.Join(templates, webhookDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{helperName: helpers}
	names := objectNames(objs)
	for _, o := range objs {
		body, err := templateObject(o, names)
		if err != nil {
			return err
		}
		suffix := strings.TrimPrefix(o.GetName(), namePrefix)
		// The kind is in the name: the rotation has a Role and a ClusterRole of one name.
		file := strings.ToLower(o.GetKind()) + "-" + suffix + ".yaml"
		if _, dup := files[file]; dup {
			return fmt.Errorf("two objects would be written to %s", file)
		}
		files[file] = generatedBy + "the webhook path only. */}}\n{{- if " + isWebhook + " }}\n" + body + "{{- end }}\n"
	}
	old, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range old {
		if _, keep := files[e.Name()]; !keep {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for file, content := range files {
		if err := writeFile(filepath.Join(dir, file), content); err != nil {
			return err
		}
	}
	return nil
}

// objectNames are the names of objs, which references between them use (a Role's resourceNames,
// the webhook configuration's Service, a binding's roleRef).
func objectNames(objs []*unstructured.Unstructured) []string {
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return names
}

func resourceName(suffix string) string {
	return `{{ include "lockedjob.resourceName" (dict "suffix" "` + suffix + `" "context" $) }}`
}

// templater turns config/default's names into the chart's: every string that names one of the
// objects becomes the release's name for it, the namespace the release's, the app name label the
// chart's, and a subject ServiceAccount the chart's ServiceAccount. The values go through
// placeholders because a template expression is not valid YAML before Helm renders it.
type templater struct {
	names []string
	exprs []string
}

func (t *templater) placeholder(expr string) string {
	t.exprs = append(t.exprs, expr)
	return fmt.Sprintf("__chartguard_%d__", len(t.exprs)-1)
}

func (t *templater) value(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = t.value(k, x)
		}
		if v["kind"] == "ServiceAccount" && v["name"] != nil {
			out["name"] = t.placeholder(`{{ include "lockedjob.serviceAccountName" . }}`)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = t.value(key, x)
		}
		return out
	case string:
		switch {
		case key == "app.kubernetes.io/name" && v == appName:
			return t.placeholder(`{{ include "lockedjob.name" . }}`)
		case v == namespace:
			return t.placeholder(`{{ .Release.Namespace }}`)
		case slices.Contains(t.names, v):
			return t.placeholder(resourceName(strings.TrimPrefix(v, namePrefix)))
		}
	}
	return v
}

func (t *templater) render(v any) (string, error) {
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	s := string(out)
	for i, expr := range t.exprs {
		s = strings.ReplaceAll(s, fmt.Sprintf("__chartguard_%d__", i), expr)
	}
	if strings.Contains(s, "__chartguard_") {
		return "", fmt.Errorf("a placeholder was left (quoted or split by the YAML writer?):\n%s", s)
	}
	return s, nil
}

// chartLabels are the labels the plugin's templates give every object, for kustomize's.
var chartLabels = map[string]string{
	"app.kubernetes.io/managed-by": `{{ .Release.Service }}`,
	"app.kubernetes.io/name":       `{{ include "lockedjob.name" . }}`,
	"helm.sh/chart":                `{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}`,
	"app.kubernetes.io/instance":   `{{ .Release.Name }}`,
}

// templateObject writes o as a template of the chart.
func templateObject(o *unstructured.Unstructured, names []string) (string, error) {
	c := o.DeepCopy()
	if c.GetNamespace() != "" && c.GetNamespace() != namespace {
		return "", fmt.Errorf("%s is not in %s", keyOf(o), namespace)
	}
	t := &templater{names: names}
	obj := t.value("", c.Object).(map[string]any)
	meta := obj["metadata"].(map[string]any)
	if _, ok := meta["labels"]; ok {
		labels := map[string]any{}
		for k, v := range chartLabels {
			labels[k] = t.placeholder(v)
		}
		meta["labels"] = labels
	}
	s, err := t.render(obj)
	if err != nil {
		return "", fmt.Errorf("%s: %w", keyOf(o), err)
	}
	return s, nil
}
