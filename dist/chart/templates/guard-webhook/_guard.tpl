{{- /* guard.admission (hack/chartguard, make helm-chart): the path of the admission gate. */}}
{{- define "lockedjob.guardWebhook" -}}
{{- $admission := .Values.guard.admission | default "policy" -}}
{{- if eq $admission "webhook" -}}
true
{{- else if ne $admission "policy" -}}
{{- fail (printf "guard.admission must be policy or webhook, not %q" $admission) -}}
{{- end -}}
{{- end }}
