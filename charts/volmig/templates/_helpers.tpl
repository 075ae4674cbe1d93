{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "volmig.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name. */}}
{{- define "volmig.fullname" -}}
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

{{- define "volmig.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the pods; never change them in an upgrade. */}}
{{- define "volmig.selectorLabels" -}}
app.kubernetes.io/name: {{ include "volmig.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "volmig.labels" -}}
helm.sh/chart: {{ include "volmig.chart" . }}
{{ include "volmig.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: volmig
{{- end }}

{{- define "volmig.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "volmig.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Namespace of the leader-election Lease. */}}
{{- define "volmig.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.leaseNamespace }}
{{- end }}

{{/* Name of the Secret holding the credentials file. */}}
{{- define "volmig.credentialsSecretName" -}}
{{- default (printf "%s-vcenter-credentials" (include "volmig.fullname" .)) .Values.vcenter.credentials.existingSecret }}
{{- end }}

{{/* Key of the credentials file inside that Secret. */}}
{{- define "volmig.credentialsSecretKey" -}}
{{- if .Values.vcenter.credentials.existingSecret }}
{{- .Values.vcenter.credentials.existingSecretKey }}
{{- else }}
{{- print "credentials" }}
{{- end }}
{{- end }}

{{/* "true" when a CA bundle is configured. */}}
{{- define "volmig.caEnabled" -}}
{{- $ca := .Values.vcenter.caBundle }}
{{- if or $ca.pem $ca.existingConfigMap $ca.existingSecret }}true{{ end }}
{{- end }}

{{/* Mount paths inside the container. */}}
{{- define "volmig.credentialsPath" -}}/etc/volmig/vcenter/credentials{{- end }}
{{- define "volmig.caPath" -}}/etc/volmig/vcenter-ca/ca.crt{{- end }}
{{- define "volmig.kubeconfigPath" -}}/etc/volmig/kubeconfig/kubeconfig{{- end }}

{{/* The image reference: repository plus digest, else tag (default appVersion). */}}
{{- define "volmig.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Refuses combinations of values that would deploy something unsafe or broken. */}}
{{- define "volmig.validate" -}}
{{- /* The schema refuses these already; the messages serve --skip-schema-validation. */}}
{{- $csi := .Values.vcenter.csiConfig | default dict }}
{{- if and (not .Values.vcenter.url) (not $csi.enabled) (not $csi.secretRef) }}
{{- fail "vcenter.url is required: set vcenter.url=https://VCENTER/sdk, or vcenter.csiConfig.enabled=true (or vcenter.csiConfig.secretRef) to read it from the vSphere CSI driver's csi-vsphere.conf" }}
{{- end }}
{{- /* --csi-config-secret excludes --csi-config and --vc-credentials-file. */}}
{{- if and $csi.secretRef (or $csi.enabled .Values.vcenter.credentials.username .Values.vcenter.credentials.existingSecret) }}
{{- fail "vcenter.csiConfig.secretRef excludes vcenter.csiConfig.enabled and vcenter.credentials: the Secret supplies the user and password" }}
{{- end }}
{{- /* A repository whose first part is no registry host (no `.` or `:`, not localhost)
is pulled from Docker Hub, where volmig publishes nothing: ImagePullBackOff. */}}
{{- $repo := .Values.image.repository }}
{{- $first := index (splitList "/" $repo) 0 }}
{{- if or (not (contains "/" $repo)) (not (or (contains "." $first) (contains ":" $first) (eq $first "localhost"))) }}
{{- fail (printf "image.repository %q names no registry: volmig publishes no image; build it from the repository's Dockerfile, push the image to a registry and set image.repository (e.g. registry.example.com/volmig)" $repo) }}
{{- end }}
{{- $ca := .Values.vcenter.caBundle }}
{{- $sources := 0 }}
{{- range (list $ca.pem $ca.existingConfigMap $ca.existingSecret) }}{{ if . }}{{ $sources = add1 $sources }}{{ end }}{{ end }}
{{- if gt $sources 1 }}
{{- fail "vcenter.caBundle: set only one of pem, existingConfigMap, existingSecret" }}
{{- end }}
{{- if and .Values.vcenter.insecure (gt $sources 0) }}
{{- fail "vcenter.insecure cannot be combined with vcenter.caBundle: trust the CA bundle or skip verification, not both" }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false allows one replica only: two replicas without a Lease would both register vmdks" }}
{{- end }}
{{- $creds := .Values.vcenter.credentials }}
{{- if and $creds.existingSecret (or $creds.username $creds.password) }}
{{- fail "vcenter.credentials: set either existingSecret or username/password, not both" }}
{{- end }}
{{- if and (or $creds.username $creds.password) (not (and $creds.username $creds.password)) }}
{{- fail "vcenter.credentials: username and password go together" }}
{{- end }}
{{- if or (contains "\n" $creds.username) (contains "\n" $creds.password) }}
{{- fail "vcenter.credentials: username and password must be single lines" }}
{{- end }}
{{- range (list $creds.username $creds.password) }}
{{- if regexMatch "^[\\s\"']|[\\s\"']$" . }}
{{- fail "vcenter.credentials: username and password cannot start or end with a blank or a quote: the credentials file format (username: X, password: Y lines) trims them" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Whole seconds of a duration such as 10m, 1h30m or 250ms (the --full-sync-interval
syntax), at least 1. */}}
{{- define "volmig.durationSeconds" -}}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 }}
{{- $n := regexFind "^[0-9]+" . | atoi }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- if eq $unit "ms" }}{{ $total = add $total (div $n 1000) }}
{{- else if eq $unit "s" }}{{ $total = add $total $n }}
{{- else if eq $unit "m" }}{{ $total = add $total (mul $n 60) }}
{{- else }}{{ $total = add $total (mul $n 3600) }}
{{- end }}
{{- end }}
{{- max $total 1 }}
{{- end }}

{{/* PromQL label matchers (without braces) selecting volmig's scrape targets. */}}
{{- define "volmig.metricsMatchers" -}}
{{- if .Values.prometheusRule.selector }}
{{- .Values.prometheusRule.selector }}
{{- else }}
{{- printf "job=%q,namespace=%q" (printf "%s-metrics" (include "volmig.fullname" .)) .Release.Namespace }}
{{- end }}
{{- end }}
