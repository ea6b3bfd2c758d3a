{{/* Names, labels and the values that several templates derive. */}}

{{- define "outbox-canary.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart's name. */}}
{{- define "outbox-canary.fullname" -}}
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

{{- define "outbox-canary.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-canary.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "outbox-canary.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "outbox-canary.selectorLabels" . }}
app.kubernetes.io/version: {{ include "outbox-canary.tag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "outbox-canary.tag" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- if eq $tag "latest" }}
{{- fail "image.tag: \"latest\" is refused; name a release (and pin image.digest)" }}
{{- end }}
{{- $tag }}
{{- end }}

{{/* registry/repository:tag, and @digest when image.digest is set. */}}
{{- define "outbox-canary.image" -}}
{{- $ref := printf "%s/%s:%s" .Values.image.registry .Values.image.repository (include "outbox-canary.tag" .) }}
{{- with .Values.image.digest }}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" .) }}
{{- fail (printf "image.digest: %q is not sha256:<64 lowercase hex digits>" .) }}
{{- end }}
{{- $ref = printf "%s@%s" $ref . }}
{{- end }}
{{- $ref }}
{{- end }}

{{- define "outbox-canary.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outbox-canary.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "outbox-canary.secretName" -}}
{{- default (include "outbox-canary.fullname" .) .Values.secret.name }}
{{- end }}

{{/* The configuration file's text: a string is used as is, a map is rendered. */}}
{{- define "outbox-canary.configText" -}}
{{- if kindIs "string" .Values.config }}
{{- .Values.config }}
{{- else if .Values.config }}
{{- toYaml .Values.config }}
{{- else }}
{{- fail "config: the outbox-canary configuration is empty (set config, or --set-file config=outbox-canary.yml)" }}
{{- end }}
{{- end }}

{{/* The config's alerting section, as YAML (the config may be a map or its text). */}}
{{- define "outbox-canary.alerting" -}}
{{- $config := .Values.config }}
{{- if kindIs "string" $config }}
{{- $config = fromYaml $config }}
{{- if hasKey $config "Error" }}
{{- fail (printf "config: not YAML: %s" $config.Error) }}
{{- end }}
{{- end }}
{{- get $config "alerting" | default dict | toYaml }}
{{- end }}

{{/* The scrape job the dead-man alert watches: the config's alerting.prober_job. */}}
{{- define "outbox-canary.proberJob" -}}
{{- get (fromYaml (include "outbox-canary.alerting" .)) "prober_job" | default "outbox-canary" }}
{{- end }}

{{/* How many replicas the rules expect: the config's alerting.replicas (1 when unset). */}}
{{- define "outbox-canary.alertingReplicas" -}}
{{- get (fromYaml (include "outbox-canary.alerting" .)) "replicas" | default 1 | int }}
{{- end }}

{{/* The memory limit in bytes, or 0 when there is none. */}}
{{- define "outbox-canary.memoryLimitBytes" -}}
{{- $limit := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = . }}{{ end }}{{ end }}{{ end }}
{{- if not $limit }}
{{- 0 }}
{{- else if or (kindIs "float64" $limit) (kindIs "int" $limit) (kindIs "int64" $limit) }}
{{- int64 $limit }}
{{- else }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $q := toString $limit }}
{{- if not (regexMatch "^[0-9]+(k|M|G|T|Ki|Mi|Gi|Ti)?$" $q) }}
{{- fail (printf "resources.limits.memory: %q: write a whole number with an optional unit (128Mi, 1Gi, 500M) so GOMEMLIMIT can be derived, or set goMemLimit.ratio to 0" $q) }}
{{- end }}
{{- $number := regexReplaceAll "^([0-9]+).*$" $q "${1}" }}
{{- $unit := regexReplaceAll "^[0-9]+" $q "" }}
{{- mul (int64 $number) (get $units $unit) }}
{{- end }}
{{- end }}

{{/* GOMEMLIMIT in bytes (goMemLimit.ratio of the memory limit), or "" for none. */}}
{{- define "outbox-canary.goMemLimit" -}}
{{- $bytes := include "outbox-canary.memoryLimitBytes" . | int64 }}
{{- $ratio := .Values.goMemLimit.ratio | default 0 | float64 }}
{{- if or (lt $ratio 0.0) (gt $ratio 1.0) }}
{{- fail (printf "goMemLimit.ratio: %v is not between 0 and 1" $ratio) }}
{{- end }}
{{- if and (gt $bytes 0) (gt $ratio 0.0) }}
{{- mulf $bytes $ratio | floor | int64 }}
{{- end }}
{{- end }}

{{/* HTTPS when the web config turns TLS on; plain HTTP on the probe port. */}}
{{- define "outbox-canary.probeScheme" -}}
{{- if include "outbox-canary.probePort" . }}HTTP{{ else if and .Values.webConfig (hasKey .Values.webConfig "tls_server_config") }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
"true" when the web config has basic auth: it covers /healthz and /readyz
too, and a kubelet's probe sends no credentials, so they are also served
on a port of their own without TLS or auth (--web.probe-address).
*/}}
{{- define "outbox-canary.probePort" -}}
{{- if and .Values.webConfig (hasKey .Values.webConfig "basic_auth_users") }}true{{ end }}
{{- end }}
