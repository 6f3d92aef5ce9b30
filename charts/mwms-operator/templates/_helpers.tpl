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

{{/* The old top-level keys of the operator pod, read for one release (each maps to operator.<key>). */}}
{{- define "mwms-operator.movedKeys" -}}
replicaCount image extraVolumes extraVolumeMounts podAnnotations podLabels podSecurityContext securityContext resources nodeSelector tolerations affinity topologySpreadConstraints priorityClassName
{{- end }}

{{/* The operator's values in their one place, `operator.*`, with an old key that is set taking its new
place: a map merged over the new default (as Helm merged it into the old default), anything else replacing
it. Use: `$op := include "mwms-operator.operator" . | fromYaml`. */}}
{{- define "mwms-operator.operator" -}}
{{- $op := deepCopy .Values.operator }}
{{- range splitList " " (include "mwms-operator.movedKeys" .) }}
{{- if hasKey $.Values . }}
{{- $old := index $.Values . }}
{{- if and (kindIs "map" $old) (kindIs "map" (index $op .)) }}
{{- $_ := set $op . (mergeOverwrite (deepCopy (index $op .)) $old) }}
{{- else }}
{{- $_ := set $op . $old }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $op }}
{{- end }}

{{/* Pull secrets of every pod of the release: global.imagePullSecrets, or the old top-level key. */}}
{{- define "mwms-operator.imagePullSecrets" -}}
{{- with (default .Values.global.imagePullSecrets .Values.imagePullSecrets) }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Each old key that is set, with where it moved, one per line (NOTES.txt warns about each). */}}
{{- define "mwms-operator.deprecatedKeys" -}}
{{- range splitList " " (include "mwms-operator.movedKeys" .) }}
{{- if hasKey $.Values . }}
{{ printf "%s -> operator.%s" . . }}
{{- end }}
{{- end }}
{{- if hasKey .Values "imagePullSecrets" }}
imagePullSecrets -> global.imagePullSecrets
{{- end }}
{{- if hasKey .Values.operator "trainerImage" }}
operator.trainerImage -> trainer.image.{repository,tag,digest}
{{- end }}
{{- end }}

{{/* A repository with its registry replaced by global.imageRegistry when set. The registry is the first
path component when it looks like a host (has a dot or a port, or is localhost), as Docker reads it. */}}
{{- define "mwms-operator.repository" -}}
{{- $registry := .context.Values.global.imageRegistry }}
{{- if $registry }}
{{- $parts := splitList "/" .repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $parts = rest $parts }}
{{- end }}
{{- printf "%s/%s" (trimSuffix "/" $registry) (join "/" $parts) }}
{{- else }}
{{- .repository }}
{{- end }}
{{- end }}

{{/* An image reference from {repository, tag, digest}: the digest wins over the tag; the tag defaults to
`default` (called with a dict: context, image, default). */}}
{{- define "mwms-operator.imageRef" -}}
{{- $repository := include "mwms-operator.repository" (dict "context" .context "repository" .image.repository) }}
{{- if .image.digest }}
{{- printf "%s@%s" $repository .image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .default .image.tag) }}
{{- end }}
{{- end }}

{{/* Operator image reference; its tag defaults to appVersion. */}}
{{- define "mwms-operator.image" -}}
{{- $op := include "mwms-operator.operator" . | fromYaml }}
{{- include "mwms-operator.imageRef" (dict "context" . "image" $op.image "default" .Chart.AppVersion) }}
{{- end }}

{{/* Default trainer image for TrainJobs (MWMS_TRAINER_IMAGE); empty leaves the operator's own default (the
same image at the operator's version), unless a registry or any part of the image is set. */}}
{{- define "mwms-operator.trainerImage" -}}
{{- $image := .Values.trainer.image }}
{{- if .Values.operator.trainerImage }}
{{- .Values.operator.trainerImage }}
{{- else if or $image.repository $image.tag $image.digest .Values.global.imageRegistry }}
{{- $ref := dict "repository" (default "ghcr.io/mwms-dev/mwms-trainer" $image.repository) "tag" $image.tag "digest" $image.digest }}
{{- include "mwms-operator.imageRef" (dict "context" . "image" $ref "default" .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Seconds from a leader-election value: a number or a duration in seconds ("15s"). */}}
{{- define "mwms-operator.seconds" -}}
{{- trimSuffix "s" (toString .) }}
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
# The worker pods and the headless Service of each job; a job's pods that go at once (cleanPodPolicy, a
# restart, a suspend) go with one deletecollection by a selector holding the job's uid.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, deletecollection]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, delete]
# Kueue (MultiKueue): the Workload of a job MultiKueue runs (read back after a 409), and the Finished
# condition of a worker cluster's copy of a job (docs/operations.md). Unused where Kueue is not installed.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, create]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
{{- end }}
