package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The blocks of the plugin's manager/manager.yaml this step adds to, as the plugin writes them
// (appliers/manager.go: templateReplicas, templateControllerManagerArgs, templateHealthProbePort,
// appendToListFromValues). Each must be there exactly once, or the step fails: a plugin that
// writes them otherwise needs this step changed, never a silently incomplete chart.
const (
	replicasLine = "  replicas: {{ .Values.manager.replicas }}\n"
	argsRange    = "        {{- range .Values.manager.args }}\n        - {{ tpl . $ }}\n        {{- end }}\n"
	healthPort   = "        ports:\n        - containerPort: {{ .Values.manager.healthProbe.port }}\n          name: health\n          protocol: TCP\n"
	mountsBlock  = "        volumeMounts:\n" +
		"          {{- if .Values.manager.extraVolumeMounts }}\n" +
		"          {{- toYaml .Values.manager.extraVolumeMounts | nindent 10 }}\n" +
		"          {{- else }}\n          []\n          {{- end }}\n"
	volumesBlock = "      volumes:\n" +
		"        {{- if .Values.manager.extraVolumes }}\n" +
		"        {{- toYaml .Values.manager.extraVolumes | nindent 8 }}\n" +
		"        {{- else }}\n        []\n        {{- end }}\n"
)

// The manager's flags that name the webhook's objects (cmd/manager/options.go). Their defaults are
// config/default's names; the chart's names follow the release, so the chart passes them.
var nameFlags = map[string]string{
	"Secret":                       "--webhook-secret-name",
	"Service":                      "--webhook-service-name",
	"MutatingWebhookConfiguration": "--webhook-configuration-name",
}

// patchManager adds the webhook path's Deployment changes to the plugin's manager template, each
// under the webhook condition.
func patchManager(templates string, v variants) error {
	path := filepath.Join(templates, "manager", "manager.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	content := string(raw)
	if strings.Contains(content, isWebhook) {
		return nil // patched by an earlier run on the same plugin output
	}
	c, err := managerDiff(v.policyManager, v.webhookManager)
	if err != nil {
		return err
	}
	t := &templater{names: objectNames(v.added)}

	args := c.args
	for _, o := range v.added {
		if flag, ok := nameFlags[o.GetKind()]; ok {
			args = append(args, flag+"="+t.placeholder(resourceName(strings.TrimPrefix(o.GetName(), namePrefix))))
		}
	}
	blocks := []struct {
		anchor, with string
		items        []any
		indent       int
	}{
		{argsRange, argsRange, args, 8},
		{healthPort, healthPort, c.ports, 8},
		{mountsBlock, "", c.volumeMounts, 10},
		{volumesBlock, "", c.volumes, 8},
	}
	if c.replicas > 1 {
		blocks = append(blocks, struct {
			anchor, with string
			items        []any
			indent       int
		}{replicasLine, "  replicas: {{ if " + isWebhook + " }}{{ max " + strconv.FormatInt(c.replicas, 10) +
			" (int .Values.manager.replicas) }}{{ else }}{{ .Values.manager.replicas }}{{ end }}\n", nil, 0})
	}
	for _, b := range blocks {
		if n := strings.Count(content, b.anchor); n != 1 {
			return fmt.Errorf("%s holds %q %d times, want once: did the plugin change its manager template?", path, b.anchor, n)
		}
		with := b.with
		if len(b.items) > 0 {
			items, err := t.list(b.items, b.indent)
			if err != nil {
				return err
			}
			pad := strings.Repeat(" ", b.indent)
			cond := pad + "{{- if " + isWebhook + " }}\n" + items + pad + "{{- end }}\n"
			switch b.anchor {
			case mountsBlock:
				with = extraList("volumeMounts", "extraVolumeMounts", cond, 8)
			case volumesBlock:
				with = extraList("volumes", "extraVolumes", cond, 6)
			default:
				with += cond
			}
		}
		if with != "" {
			content = strings.Replace(content, b.anchor, with, 1)
		}
	}
	return writeFile(path, generatedBy+"the webhook path adds to the manager Deployment. */}}\n"+content)
}

// extraList is the plugin's list of manager.extra<Field> with the webhook path's items first:
// [] when there is neither, as the plugin writes it.
func extraList(field, values, webhookItems string, indent int) string {
	pad, child := strings.Repeat(" ", indent), strings.Repeat(" ", indent+2)
	nindent := strconv.Itoa(indent + 2)
	return pad + field + ":\n" +
		child + "{{- if or (" + isWebhook + ") .Values.manager." + values + " }}\n" +
		webhookItems +
		child + "{{- with .Values.manager." + values + " }}\n" +
		child + "{{- toYaml . | nindent " + nindent + " }}\n" +
		child + "{{- end }}\n" +
		child + "{{- else }}\n" + child + "[]\n" + child + "{{- end }}\n"
}

// list writes items as a YAML list indented by indent, names templated.
func (t *templater) list(items []any, indent int) (string, error) {
	var b strings.Builder
	for _, it := range items {
		out, err := t.render([]any{t.value("", it)})
		if err != nil {
			return "", err
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
			b.WriteString(strings.Repeat(" ", indent) + line + "\n")
		}
	}
	return b.String(), nil
}

// valuesBlock is the chart's value, appended to the plugin's values.yaml (which the plugin writes
// once and then preserves) when it is not there yet.
const valuesBlock = `
## Admission gate of guarded Jobs and Pods (hack/chartguard, make helm-chart; docs/deploy.md).
## - policy (default): the MutatingAdmissionPolicies, Kubernetes 1.36 and later.
## - webhook: the same mutation served by the manager as a webhook, for clusters before 1.36:
##   a MutatingWebhookConfiguration, its Service, the Secret of the certificate the manager
##   rotates itself, the rotation's RBAC, a PodDisruptionBudget and at least two replicas.
## Either way the validating policies are installed. webhook.enabled and webhook.port above are
## the Helm plugin's and select nothing here.
##
guard:
  admission: policy
`

// ensureValue appends block, which sets the top-level value key, to values.yaml unless it holds
// it; a key of another shape fails the step.
func ensureValue(path, block, key string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	content := string(raw)
	switch {
	case strings.Contains(content, block):
		return nil
	case strings.Contains(content, "\n"+key+":"):
		return fmt.Errorf("%s has a %s: key that is not this step's; remove it and run make helm-chart", path, key)
	}
	return writeFile(path, strings.TrimRight(content, "\n")+"\n"+block)
}
