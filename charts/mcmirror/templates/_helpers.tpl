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
{{- if and (eq .Values.dns.source "import") .Values.dns.enabled (not .Values.controller.enabled) -}}
{{- fail "dns.source=import needs controller.enabled: in import mode the DNS answers from the mirrors the controller writes" -}}
{{- end -}}
{{- if and .Values.admissionPolicy.enabled (not .Values.controller.enabled) -}}
{{- fail "admissionPolicy.enabled needs controller.enabled: the policy lets only the controller write mirror labels" -}}
{{- end -}}
{{- end -}}

{{/*
mcmirror's block of the Corefile, unindented: what `coredns-mc dns apply`
adds to the cluster's own Corefile (dns-patch.yaml), and what the Corefile
of coredns.yaml (dns.patchDeployment=false) holds.
*/}}
{{- define "mcmirror.dnsStanza" -}}
mcmirror {{ .Values.dns.clusterDomain }} clusterset.local in-addr.arpa ip6.arpa {
    # This cluster's name, as the other clusters link it, and as
    # --cluster of the mirror controller (controller.yaml).
    # Value: cluster.
    cluster {{ .Values.cluster }}
    # clusterset.local is served with the names of the
    # Multi-Cluster Services API's DNS specification (the
    # ServiceImports' ClusterSetIPs and Headless pods), and
    # answered there alone.
    clusterset clusterset.local
    {{- if eq .Values.dns.source "import" }}
    # Import mode: the linked clusters' exports are read from the
    # mirrors the controller writes here; no linked cluster is watched
    # from this server. Value: dns.source.
    source import
    {{- else }}
    # Linked clusters: the Linkerd-format kubeconfig Secrets in this
    # namespace, picked up and dropped at run time.
    link_secrets {{ .Values.linkNamespace }}
    {{- end }}
    ttl 5
    # Gateway mode: leave the members of a cluster whose gateway is
    # down out of the -global names, as this cluster's gateway sees
    # them (its /peers, on the Service mcmirror-gateway-metrics,
    # gateway.yaml). A Service name in this zone is looked up
    # through this server itself: the DNS pods resolve other names
    # with their node's resolver (dnsPolicy: Default).
    # Value: dns.gatewayHealth (default: that Service, with the
    # gateway).
    {{- $health := .Values.dns.gatewayHealth }}
    {{- if and (not $health) .Values.gateway.enabled }}
    {{- $health = printf "http://mcmirror-gateway-metrics.%s.svc.%s:9155/peers" .Release.Namespace .Values.dns.clusterDomain }}
    {{- end }}
    {{- if $health }}
    gateway_health {{ $health }}
    {{- end }}
    # Reverse lookups of addresses that are not mirror ClusterIPs go
    # on to kubernetes.
    fallthrough in-addr.arpa ip6.arpa
}
{{- end -}}

{{/*
Replace mode's check of the cluster's CoreDNS, before anything changes:
the Deployment dns.coredns.deployment in kube-system, when `helm install`
or `helm upgrade` finds it (`lookup`; `helm template` finds nothing and
checks nothing), must be laid out as dns.coredns and the JSON patch
(files/coredns-patch.yaml) say, and leave the rollout a node for its new
pods. Where it is not, the install fails with what differs and the value
or mode to use, in helm's own output.
*/}}
{{- define "mcmirror.checkCoreDNS" -}}
{{- $c := .Values.dns.coredns }}
{{- $d := lookup "apps/v1" "Deployment" "kube-system" $c.deployment }}
{{- if $d }}
{{- $ref := printf "kube-system/%s" $c.deployment }}
{{- $how := "Set the value named (helm upgrade --install with --set), or install with dns.mode=forward, which leaves the cluster DNS as it is (deploy/README.md, \"Replace or forward\"); nothing was changed" }}
{{- $spec := $d.spec.template.spec }}
{{- $sa := $spec.serviceAccountName | default "default" }}
{{- if ne $sa $c.serviceAccount }}
{{- fail (printf "%s runs as ServiceAccount %s, not %s (dns.coredns.serviceAccount=%s). %s" $ref $sa $c.serviceAccount $sa $how) }}
{{- end }}
{{- $ctr := index $spec.containers 0 }}
{{- if ne $ctr.name $c.container }}
{{- fail (printf "%s: its first container is named %s, not %s (dns.coredns.container=%s). %s" $ref $ctr.name $c.container $ctr.name $how) }}
{{- end }}
{{- $args := $ctr.args | default list }}
{{- if not (and (eq (len $args) 2) (eq (index $args 0) "-conf") (eq (index $args 1) "/etc/coredns/Corefile")) }}
{{- fail (printf "%s: container %s has the args %v, not [-conf /etc/coredns/Corefile]: replace mode cannot patch it. %s" $ref $ctr.name $args $how) }}
{{- end }}
{{- $mount := index ($ctr.volumeMounts | default (list dict)) 0 }}
{{- if or (ne ($mount.mountPath | default "") "/etc/coredns") (ne ($mount.name | default "") $c.volume) }}
{{- fail (printf "%s: container %s's first volume mount is %s at %s, not %s at /etc/coredns (where mounted at /etc/coredns: dns.coredns.volume=%s). %s" $ref $ctr.name ($mount.name | default "none") ($mount.mountPath | default "-") $c.volume ($mount.name | default "?") $how) }}
{{- end }}
{{- $vol := index ($spec.volumes | default (list dict)) 0 }}
{{- if ne ($vol.name | default "") $c.volume }}
{{- fail (printf "%s: its first volume is %s, not %s, the one mounted at /etc/coredns: replace mode patches the first volume. %s" $ref ($vol.name | default "none") $c.volume $how) }}
{{- end }}
{{- if not $vol.configMap }}
{{- fail (printf "%s: volume %s is not a configMap volume: replace mode reads the Corefile from a ConfigMap. %s" $ref $vol.name $how) }}
{{- end }}
{{- if not (has $vol.configMap.name (list $c.configMap "coredns-mcmirror")) }}
{{- fail (printf "%s: volume %s is the ConfigMap %s, not %s (dns.coredns.configMap=%s). %s" $ref $vol.name $vol.configMap.name $c.configMap $vol.configMap.name $how) }}
{{- end }}
{{- $live := (($ctr.livenessProbe | default dict).httpGet | default dict) }}
{{- $ready := (($ctr.readinessProbe | default dict).httpGet | default dict) }}
{{- if not (and (eq ($live.path | default "") "/health") (eq (toString ($live.port | default "")) "8080") (eq ($ready.path | default "") "/ready") (eq (toString ($ready.port | default "")) "8181")) }}
{{- fail (printf "%s: container %s's probes are not liveness /health on 8080 and readiness /ready on 8181, which the Corefile's health and ready serve: replace mode cannot patch it. %s" $ref $ctr.name $how) }}
{{- end }}
{{- /* The rollout starts every new pod before an old one stops (the
patch's maxSurge 100%, maxUnavailable 0): a pod template that requires a
node of its own per DNS pod (RKE2's rke2-coredns: a required
podAntiAffinity on kubernetes.io/hostname against k8s-app=kube-dns) leaves
no node for a new pod where the nodes are no more than the replicas, and
the hook would wait until it timed out. */}}
{{- $labels := ($d.spec.template.metadata | default dict).labels | default dict }}
{{- $replicas := int ($d.spec.replicas | default 1) }}
{{- range $term := ((($spec.affinity | default dict).podAntiAffinity | default dict).requiredDuringSchedulingIgnoredDuringExecution | default list) }}
{{- if and (eq ($term.topologyKey | default "") "kubernetes.io/hostname") (include "mcmirror.selects" (dict "selector" $term.labelSelector "labels" $labels)) }}
{{- $nodes := 0 }}
{{- range (lookup "v1" "Node" "" "").items | default list }}
{{- if not (.spec | default dict).unschedulable }}
{{- $nodes = add1 $nodes }}
{{- end }}
{{- end }}
{{- if and (gt $nodes 0) (le $nodes $replicas) }}
{{- fail (printf "%s requires a node of its own for each of its pods (a required podAntiAffinity on kubernetes.io/hostname that selects them), and has no node to spare (replicas %d, schedulable nodes %d): replace mode's rollout starts each new DNS pod before an old one stops, so that the cluster DNS always answers, and no node is left for it; the install would wait until it timed out. Make that anti-affinity preferred (RKE2: a HelmChartConfig for rke2-coredns whose valuesContent sets affinity with preferredDuringSchedulingIgnoredDuringExecution), or add a node, or install with dns.mode=forward, which leaves the cluster DNS as it is (deploy/README.md, \"CoreDNS that is not kubeadm's\"); nothing was changed" $ref $replicas $nodes) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Whether the label selector selects a set of labels: each of its
matchLabels, and each of its matchExpressions (In, NotIn, Exists,
DoesNotExist), holds. A selector that is absent selects nothing, as in a
pod affinity term. Renders "true" or nothing.
*/}}
{{- define "mcmirror.selects" -}}
{{- if .selector }}
{{- $ok := true }}
{{- range $k, $v := .selector.matchLabels | default dict }}
{{- if ne (toString (get $.labels $k)) (toString $v) }}{{ $ok = false }}{{ end }}
{{- if not (hasKey $.labels $k) }}{{ $ok = false }}{{ end }}
{{- end }}
{{- range $e := .selector.matchExpressions | default list }}
{{- $has := hasKey $.labels $e.key }}
{{- $in := and $has (has (toString (get $.labels $e.key)) ($e.values | default list)) }}
{{- if and (eq $e.operator "In") (not $in) }}{{ $ok = false }}{{ end }}
{{- if and (eq $e.operator "NotIn") $in }}{{ $ok = false }}{{ end }}
{{- if and (eq $e.operator "Exists") (not $has) }}{{ $ok = false }}{{ end }}
{{- if and (eq $e.operator "DoesNotExist") $has }}{{ $ok = false }}{{ end }}
{{- end }}
{{- if $ok }}true{{ end }}
{{- end }}
{{- end -}}
