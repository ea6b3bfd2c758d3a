{{/*
The prober's pod template, shared by the Deployment (one prober) and the
StatefulSets of the redundant and sharded modes (docs/fleet.md). Called
with a dict: root (the chart's context) and, in those modes, shard (the
shard's index) and fleet (true).
*/}}
{{- define "outbox-canary.podTemplate" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $goMemLimit := include "outbox-canary.goMemLimit" $root }}
{{- $scheme := include "outbox-canary.probeScheme" $root }}
{{- $probePort := include "outbox-canary.probePort" $root -}}
metadata:
  labels:
    {{- include "outbox-canary.labels" $root | nindent 4 }}
    {{- if .fleet }}
    {{- include "outbox-canary.shardLabel" .shard | nindent 4 }}
    {{- end }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A change of the configuration (or of a chart-made Secret) changes
    # the pod template, so the pod is replaced and reads it.
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- if $v.secret.create }}
    checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
    {{- end }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "outbox-canary.serviceAccountName" $root }}
  automountServiceAccountToken: false
  # No service environment variables: the prober reads its addresses
  # from its configuration only.
  enableServiceLinks: false
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  containers:
    - name: outbox-canary
      image: {{ include "outbox-canary.image" $root | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args:
        - run
        - --config.file=/etc/outbox-canary/config/outbox-canary.yml
        - --web.listen-address=:9465
        {{- if $v.webConfig }}
        - --web.config.file=/etc/outbox-canary/config/web-config.yml
        {{- end }}
        {{- if $probePort }}
        - --web.probe-address=:9466
        {{- end }}
        - --state.dir=/var/lib/outbox-canary
        - --log.level={{ $v.log.level }}
        - --log.format={{ $v.log.format }}
        {{- with $v.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or $goMemLimit $v.extraEnv .fleet }}
      env:
        {{- if .fleet }}
        # Each replica judges only its own canaries: its pod name is its
        # instance id, unique among the pods measuring a pipeline.
        - name: OUTBOX_CANARY_INSTANCE_ID
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- if gt (int $v.fleet.shards) 1 }}
        - name: OUTBOX_CANARY_SHARD_COUNT
          value: {{ $v.fleet.shards | int | quote }}
        - name: OUTBOX_CANARY_SHARD_INDEX
          value: {{ .shard | int | quote }}
        {{- end }}
        {{- end }}
        {{- with $goMemLimit }}
        - name: GOMEMLIMIT
          value: {{ . | quote }}
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      ports:
        - name: http
          containerPort: 9465
          protocol: TCP
        {{- if $probePort }}
        # /healthz and /readyz only, without TLS or auth, for the kubelet.
        - name: probes
          containerPort: 9466
          protocol: TCP
        {{- end }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: {{ ternary "probes" "http" (eq $probePort "true") }}
          scheme: {{ $scheme }}
        {{- toYaml $v.livenessProbe | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: {{ ternary "probes" "http" (eq $probePort "true") }}
          scheme: {{ $scheme }}
        {{- toYaml $v.readinessProbe | nindent 8 }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/outbox-canary/config
          readOnly: true
        - name: secrets
          mountPath: {{ $v.secret.mountPath }}
          readOnly: true
        - name: state
          mountPath: /var/lib/outbox-canary
        {{- with $v.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "outbox-canary.fullname" $root }}
    - name: secrets
      secret:
        secretName: {{ include "outbox-canary.secretName" $root }}
        # Readable by the pod's group (fsGroup), by no one else.
        defaultMode: 0440
    {{- if not $v.persistence.enabled }}
    - name: state
      emptyDir:
        sizeLimit: {{ $v.persistence.emptyDirSizeLimit }}
    {{- else if not .fleet }}
    - name: state
      persistentVolumeClaim:
        claimName: {{ $v.persistence.existingClaim | default (printf "%s-state" (include "outbox-canary.fullname" $root)) }}
    {{- end }}
    {{- /* In the fleet modes with persistence, "state" is each pod's own claim (volumeClaimTemplates). */}}
    {{- with $v.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $v.affinity }}
  affinity:
    {{- toYaml $v.affinity | nindent 4 }}
  {{- else if and .fleet (gt (int $v.fleet.replicas) 1) }}
  # The replicas of a shard on different nodes, so one node's loss or
  # drain leaves the shard's pipelines measured.
  affinity:
    podAntiAffinity:
      {{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (fromYaml (include "outbox-canary.fleetSelectorLabels" (dict "root" $root "shard" .shard)))) }}
      {{- if eq $v.fleet.antiAffinity "hard" }}
      requiredDuringSchedulingIgnoredDuringExecution:
        {{- toYaml (list $term) | nindent 8 }}
      {{- else }}
      preferredDuringSchedulingIgnoredDuringExecution:
        {{- toYaml (list (dict "weight" 100 "podAffinityTerm" $term)) | nindent 8 }}
      {{- end }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The label that tells a shard's pods from the others'. */}}
{{- define "outbox-canary.shardLabel" -}}
outbox-canary.io/shard: {{ . | int | quote }}
{{- end }}

{{/* The selector of one shard's StatefulSet: the release's, and the shard. */}}
{{- define "outbox-canary.fleetSelectorLabels" -}}
{{ include "outbox-canary.selectorLabels" .root }}
{{ include "outbox-canary.shardLabel" .shard }}
{{- end }}

{{/* "true" when the values ask for more than the one Deployment's prober. */}}
{{- define "outbox-canary.fleet" -}}
{{- if or (gt (int .Values.fleet.shards) 1) (gt (int .Values.fleet.replicas) 1) }}true{{ end }}
{{- end }}

{{/* The StatefulSet of a shard: the release's name alone with one shard. */}}
{{- define "outbox-canary.shardName" -}}
{{- if gt (int .root.Values.fleet.shards) 1 }}
{{- printf "%s-shard-%d" (include "outbox-canary.fullname" .root | trunc 44 | trimSuffix "-") (int .shard) }}
{{- else }}
{{- include "outbox-canary.fullname" .root | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
