{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "rocketcluster-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "rocketcluster-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rocketcluster-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "rocketcluster-operator.labels" -}}
helm.sh/chart: {{ include "rocketcluster-operator.chart" . }}
{{ include "rocketcluster-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rocketcluster
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "rocketcluster-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rocketcluster-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "rocketcluster-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rocketcluster-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "rocketcluster-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespaces a namespace-scoped operator watches (a list; the release namespace by default). */}}
{{- define "rocketcluster-operator.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces }}
{{- toJson .Values.operator.watchNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* Fail early on a scope the chart does not know. */}}
{{- define "rocketcluster-operator.validate" -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespace")) }}
{{- fail (printf "rbac.scope must be \"cluster\" or \"namespace\", not %q" .Values.rbac.scope) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.operator.peering) }}
{{- fail "replicaCount > 1 needs operator.peering (a kopf peering name) so that one replica is active" }}
{{- end }}
{{- end }}

{{/* The relabeling source label of a pod label: __meta_kubernetes_pod_label_<sanitized name>. */}}
{{- define "rocketcluster-operator.metaPodLabel" -}}
{{- printf "__meta_kubernetes_pod_label_%s" (regexReplaceAll "[^a-zA-Z0-9_]" . "_") }}
{{- end }}
