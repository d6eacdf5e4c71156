{{/*
The image reference of every part: repository@digest, or repository:tag.
*/}}
{{- define "mcmirror.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/*
Labels of a part's objects: (dict "root" $ "name" "mcmirror-controller").
app.kubernetes.io/name doubles as the selector of the part's pods, so it
never changes.
*/}}
{{- define "mcmirror.labels" -}}
labels: {app.kubernetes.io/name: {{ .name }}, app.kubernetes.io/part-of: mcmirror
{{- range $k, $v := .root.Values.commonLabels }}, {{ $k }}: {{ $v | quote }}{{ end }}}
{{- end -}}

{{/*
The controller's ServiceAccount as the API server names it.
*/}}
{{- define "mcmirror.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:mcmirror-controller
{{- end -}}

{{/*
The Namespace objects a file of the plain manifests (deploy/) starts with,
so that each applies on its own: (dict "root" $ "names" (list ...)).
The release's namespace only with namespace.create (helm install makes it
with --create-namespace); the link namespace by the first part that uses
it, or by each with namespace.create.
*/}}
{{- define "mcmirror.namespaces" -}}
{{- $root := .root -}}
{{- range .names }}
{{- if or $root.Values.namespace.create (ne . $root.Release.Namespace) }}
apiVersion: v1
kind: Namespace
metadata: {name: {{ . }}}
---
{{- end }}
{{- end }}
{{- end -}}

{{/*
Whether this part (controller or dns) makes the link namespace: with
namespace.create each does; otherwise the controller, or the DNS when there
is no controller.
*/}}
{{- define "mcmirror.ownsLinkNamespace" -}}
{{- if or .root.Values.namespace.create (eq .part "controller") (and (eq .part "dns") (not .root.Values.controller.enabled)) -}}
true
{{- end -}}
{{- end -}}

{{/*
Checks of values across fields, which values.schema.json cannot say.
*/}}
{{- define "mcmirror.validate" -}}
{{- if and .Values.gateway.enabled (not .Values.gateway.allowClusters) -}}
{{- fail "gateway.allowClusters: name at least one cluster that links to this one (--set gateway.allowClusters={west}); without it the ingress would let in every cluster of the trust root" -}}
{{- end -}}
{{- range .Values.gateway.allowClusters -}}
{{- if eq . $.Values.cluster -}}
{{- fail (printf "gateway.allowClusters: %q is this cluster's own name (cluster)" .) -}}
{{- end -}}
{{- end -}}
{{- range $name, $addr := .Values.gateway.peers -}}
{{- if eq $name $.Values.cluster -}}
{{- fail (printf "gateway.peers: %q is this cluster's own name (cluster)" $name) -}}
{{- end -}}
{{- end -}}
{{- $ports := splitList "-" .Values.egressPorts -}}
{{- if gt (index $ports 0 | atoi) (index $ports 1 | atoi) -}}
{{- fail (printf "egressPorts %s: want LOW-HIGH with LOW <= HIGH" .Values.egressPorts) -}}
{{- end -}}
{{- if and .Values.admissionPolicy.enabled (not .Values.controller.enabled) -}}
{{- fail "admissionPolicy.enabled needs controller.enabled: the policy lets only the controller write mirror labels" -}}
{{- end -}}
{{- end -}}
