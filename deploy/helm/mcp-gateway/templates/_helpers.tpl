{{/* Names and labels shared by every template. */}}
{{- define "mcpgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcpgw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name: <fullname>-<component>. */}}
{{- define "mcpgw.component" -}}
{{- printf "%s-%s" (include "mcpgw.fullname" .root) .component -}}
{{- end -}}

{{- define "mcpgw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: {{ include "mcpgw.name" .root }}
{{ include "mcpgw.selectorLabels" . }}
{{- end -}}

{{- define "mcpgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpgw.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The cluster-local DNS name of a component's Service. */}}
{{- define "mcpgw.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "mcpgw.component" .) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{- define "mcpgw.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret and key MCPGW_REDIS is read from: the user's, or the chart's own. */}}
{{- define "mcpgw.redisSecretName" -}}
{{- if and (eq .Values.redis.mode "external") .Values.redis.external.existingSecret.name -}}
{{- .Values.redis.external.existingSecret.name -}}
{{- else -}}
{{- include "mcpgw.component" (dict "root" . "component" "redis-address") -}}
{{- end -}}
{{- end -}}

{{- define "mcpgw.redisSecretKey" -}}
{{- if and (eq .Values.redis.mode "external") .Values.redis.external.existingSecret.name -}}
{{- .Values.redis.external.existingSecret.key -}}
{{- else -}}
address
{{- end -}}
{{- end -}}

{{/* With the chart's Sentinel setup: every Sentinel by its pod's stable name. */}}
{{- define "mcpgw.sentinelAddress" -}}
{{- $redis := include "mcpgw.component" (dict "root" . "component" "redis") -}}
{{- $hosts := list -}}
{{- range $ordinal := until (int .Values.redis.sentinel.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc.%s:26379" $redis $ordinal $redis $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- printf "sentinel://%s/%s" (join "," $hosts) .Values.redis.sentinel.primaryName -}}
{{- end -}}

{{/* Environment every gateway process shares: its pod name (replica id), Redis from the Secret. */}}
{{- define "mcpgw.gatewayEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: { fieldPath: metadata.name }
- name: MCPGW_REDIS
  valueFrom:
    secretKeyRef:
      name: {{ include "mcpgw.redisSecretName" . }}
      key: {{ include "mcpgw.redisSecretKey" . }}
- name: MCPGW_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{- define "mcpgw.waitReplicasArgs" -}}
{{- if ne (toString .Values.redis.waitReplicas) "" }}
- --redis-wait-replicas={{ .Values.redis.waitReplicas }}
{{- end }}
{{- end -}}

{{/* Containers run as an unprivileged user with a read-only root file system. */}}
{{- define "mcpgw.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "mcpgw.podSecurity" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Replicas of one component spread over nodes where there are several. */}}
{{- define "mcpgw.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "mcpgw.selectorLabels" . | nindent 8 }}
{{- end -}}

{{- define "mcpgw.scheduling" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Checks of combinations the schema cannot express; each names the value to set. */}}
{{- define "mcpgw.validate" -}}
{{- if and (eq .Values.registry.source "portal") (not .Values.registry.portal.url) -}}
{{- fail "registry.source is portal: set registry.portal.url (e.g. http://portal.portal.svc:8080)" -}}
{{- end -}}
{{- if and (eq .Values.registry.source "configMap") (not .Values.registry.configMap.create) (not .Values.registry.configMap.name) -}}
{{- fail "registry.configMap.create is false: set registry.configMap.name to your ConfigMap (key registry.yaml)" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "external") (not .Values.redis.external.address) (not .Values.redis.external.existingSecret.name) -}}
{{- fail "redis.mode is external: set redis.external.address or redis.external.existingSecret.name" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "sentinel") (lt (int .Values.redis.sentinel.replicas) (int .Values.redis.sentinel.quorum)) -}}
{{- fail "redis.sentinel.quorum is larger than redis.sentinel.replicas: no failover could ever be agreed" -}}
{{- end -}}
{{- end -}}
