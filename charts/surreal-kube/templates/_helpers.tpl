{{/*
The chart name: nameOverride or the chart's own, truncated to 63 and trimmed of a trailing '-'.
*/}}
{{- define "surreal-kube.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name of the release's objects: fullnameOverride, else <release>-<chart> (just the release
when it already contains the chart name), truncated to 63 and trimmed of a trailing '-'.
*/}}
{{- define "surreal-kube.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
chart label value: <chart>-<version>, '+' replaced, truncated to 63 and trimmed of a trailing '-'.
*/}}
{{- define "surreal-kube.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of every object of the release.
*/}}
{{- define "surreal-kube.labels" -}}
helm.sh/chart: {{ include "surreal-kube.chart" . }}
{{ include "surreal-kube.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: surreal-kube
{{- end -}}

{{/*
Selector labels: stable across upgrades (never the version).
*/}}
{{- define "surreal-kube.selectorLabels" -}}
app.kubernetes.io/name: {{ include "surreal-kube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "surreal-kube.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "surreal-kube.fullname" .) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The image reference: repository@digest when a digest is set, else repository:tag (tag defaults
to the chart's appVersion).
*/}}
{{- define "surreal-kube.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Namespaces the operator watches: watchNamespaces, else the release namespace.
*/}}
{{- define "surreal-kube.watchNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
The name of the node-reading ClusterRole (and its binding): <fullname>-nodes within 63.
*/}}
{{- define "surreal-kube.nodesRoleName" -}}
{{- printf "%s-nodes" (include "surreal-kube.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{/*
The leader election's Role and RoleBinding: <fullname>-leader within 63.
*/}}
{{- define "surreal-kube.leaderName" -}}
{{- printf "%s-leader" (include "surreal-kube.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{/*
The operator's metrics Service: <fullname>-metrics within 63.
*/}}
{{- define "surreal-kube.metricsName" -}}
{{- printf "%s-metrics" (include "surreal-kube.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/*
The operator's profile ConfigMap: <fullname>-profile within 63.
*/}}
{{- define "surreal-kube.profileName" -}}
{{- printf "%s-profile" (include "surreal-kube.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/*
Labels of the `helm test` objects: the release's, with component helm-test (never the operator's
selector labels: the metrics Service must not select the test pod).
*/}}
{{- define "surreal-kube.testLabels" -}}
helm.sh/chart: {{ include "surreal-kube.chart" . }}
app.kubernetes.io/name: {{ include "surreal-kube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: surreal-kube
{{- end -}}

{{/*
Where `helm test` runs its Experiment: helmTest.namespace, else the first watched namespace, else
the release namespace.
*/}}
{{- define "surreal-kube.testNamespace" -}}
{{- .Values.helmTest.namespace | default (first .Values.watchNamespaces) | default .Release.Namespace -}}
{{- end -}}
