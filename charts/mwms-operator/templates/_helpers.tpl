{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "mwms-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: the release name when it already contains the chart name. */}}
{{- define "mwms-operator.fullname" -}}
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

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "mwms-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every object carries whatever it is (Helm's and Kubernetes' recommended set, less name and
instance, which each object's selector subset below adds). */}}
{{- define "mwms-operator.commonLabels" -}}
helm.sh/chart: {{ include "mwms-operator.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mwms
{{- end }}

{{/* Labels on every object of the release but the bundled MLflow's: the full recommended set. */}}
{{- define "mwms-operator.labels" -}}
{{ include "mwms-operator.commonLabels" . }}
{{ include "mwms-operator.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* Name and instance: the stable part of every selector. */}}
{{- define "mwms-operator.instanceLabels" -}}
app.kubernetes.io/name: {{ include "mwms-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of the operator's Deployment, pod and Service: the full set plus its component. */}}
{{- define "mwms-operator.operatorLabels" -}}
{{ include "mwms-operator.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Selector labels of the operator pod: only labels that never change with an upgrade (a Deployment's
selector is immutable). */}}
{{- define "mwms-operator.selectorLabels" -}}
{{ include "mwms-operator.instanceLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Name of the bundled MLflow's Deployment, Service and PVC: `<release>-mlflow` unless mlflow.name is set, so two
releases in one namespace do not collide. */}}
{{- define "mwms-operator.mlflowName" -}}
{{- default (printf "%s-mlflow" .Release.Name | trunc 63 | trimSuffix "-") .Values.mlflow.name }}
{{- end }}

{{/* Labels of the bundled MLflow's objects: the recommended set, named and versioned as MLflow. */}}
{{- define "mwms-operator.mlflowLabels" -}}
{{ include "mwms-operator.commonLabels" . }}
{{ include "mwms-operator.mlflowSelectorLabels" . }}
app.kubernetes.io/version: {{ .Values.mlflow.image.tag | trunc 63 | trimSuffix "-" | quote }}
{{- end }}

{{/* Selector labels of the bundled MLflow pod. */}}
{{- define "mwms-operator.mlflowSelectorLabels" -}}
app.kubernetes.io/name: mlflow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: tracking
{{- end }}

{{/* ServiceAccount the operator runs as. */}}
{{- define "mwms-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mwms-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference from {repository, tag, digest}: the digest wins over the tag; the tag defaults to
`default` (called with a dict: image, default). */}}
{{- define "mwms-operator.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .default .image.tag) }}
{{- end }}
{{- end }}

{{/* Operator image reference; its tag defaults to appVersion. */}}
{{- define "mwms-operator.image" -}}
{{- include "mwms-operator.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion) }}
{{- end }}

{{/* Tracking URI the operator gives TrainJobs by default; empty leaves the operator's own default. */}}
{{- define "mwms-operator.trackingUri" -}}
{{- if .Values.operator.trackingUri }}
{{- .Values.operator.trackingUri }}
{{- else if .Values.mlflow.enabled }}
{{- printf "http://%s.%s.svc:5000" (include "mwms-operator.mlflowName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/* Host headers the bundled MLflow accepts: its in-cluster names (with and without port) and localhost. */}}
{{- define "mwms-operator.mlflowAllowedHosts" -}}
{{- $svc := include "mwms-operator.mlflowName" . }}
{{- $ns := .Release.Namespace }}
{{- $domains := list "cluster.local" }}
{{- if and .Values.operator.clusterDomain (ne .Values.operator.clusterDomain "cluster.local") }}
{{- $domains = append $domains .Values.operator.clusterDomain }}
{{- end }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) }}
{{- range $domains }}
{{- $names = append $names (printf "%s.%s.svc.%s" $svc $ns .) }}
{{- end }}
{{- $hosts := list }}
{{- range $names }}
{{- $hosts = concat $hosts (list . (printf "%s:5000" .)) }}
{{- end }}
{{- $hosts = concat $hosts (list "localhost" "localhost:*" "127.0.0.1" "127.0.0.1:*") .Values.mlflow.extraAllowedHosts }}
{{- join "," $hosts }}
{{- end }}

{{/* The operator's rights on TrainJobs, their pods and Services: one ClusterRole, or one Role per watched
namespace. */}}
{{- define "mwms-operator.jobRules" -}}
# The TrainJobs: watch them, let kopf patch its annotations and the status, delete them after their TTL.
- apiGroups: [mwms.dev]
  resources: [trainjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [mwms.dev]
  resources: [trainjobs/status]
  verbs: [get, patch]
# Owner references with blockOwnerDeletion need this (OwnerReferencesPermissionEnforcement admission).
- apiGroups: [mwms.dev]
  resources: [trainjobs/finalizers]
  verbs: [update]
# The worker pods and the headless Service of each job.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, delete]
{{- end }}
