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
{{- printf "%s://%s/%s" (ternary "sentinels" "sentinel" .Values.redis.sentinel.tls.enabled) (include "mcpgw.sentinelHosts" .) .Values.redis.sentinel.primaryName -}}
{{- end -}}

{{/* HOST:PORT,… of every Sentinel of the chart's Redis. */}}
{{- define "mcpgw.sentinelHosts" -}}
{{- $redis := include "mcpgw.component" (dict "root" . "component" "redis") -}}
{{- $hosts := list -}}
{{- range $ordinal := until (int .Values.redis.sentinel.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc.%s:26379" $redis $ordinal $redis $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $hosts -}}
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
{{- if eq .Values.inside.certificates.source "existingSecrets" -}}
{{- range $part, $secret := .Values.inside.certificates.existingSecrets -}}
{{- if not $secret -}}
{{- fail (printf "inside.certificates.source is existingSecrets: set inside.certificates.existingSecrets.%s (a Secret with tls.crt, tls.key, ca.crt)" $part) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "sentinel") .Values.redis.sentinel.tls.enabled (not .Values.redis.sentinel.tls.existingSecret) (ne .Values.inside.certificates.source "generate") -}}
{{- fail "redis.sentinel.tls.enabled with inside.certificates.source existingSecrets: set redis.sentinel.tls.existingSecret (a Secret with tls.crt, tls.key, ca.crt)" -}}
{{- end -}}
{{- if and .Values.rateLimit.enabled (eq .Values.redis.mode "external") (not .Values.rateLimit.externalRedis.url) -}}
{{- fail "rateLimit.enabled with redis.mode external: set rateLimit.externalRedis.url (HOST:PORT, or PRIMARY,HOST:PORT,… with rateLimit.externalRedis.type SENTINEL): the ratelimit service takes no redis:// address" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "sentinel") (lt (int .Values.redis.sentinel.replicas) (int .Values.redis.sentinel.quorum)) -}}
{{- fail "redis.sentinel.quorum is larger than redis.sentinel.replicas: no failover could ever be agreed" -}}
{{- end -}}
{{- end -}}

{{/* The Secret (tls.crt, tls.key, ca.crt) with a part's internal certificate: part is envoy, sidecar or control-plane. */}}
{{- define "mcpgw.internalTlsSecret" -}}
{{- $own := dict "envoy" .root.Values.inside.certificates.existingSecrets.envoy "sidecar" .root.Values.inside.certificates.existingSecrets.sidecar "control-plane" .root.Values.inside.certificates.existingSecrets.controlPlane -}}
{{- if eq .root.Values.inside.certificates.source "existingSecrets" -}}
{{- index $own .part -}}
{{- else -}}
{{- include "mcpgw.component" (dict "root" .root "component" (printf "%s-internal-tls" .part)) -}}
{{- end -}}
{{- end -}}

{{- define "mcpgw.adminTokenSecret" -}}
{{- default (include "mcpgw.component" (dict "root" . "component" "admin-token")) .Values.inside.adminTokenSecret -}}
{{- end -}}

{{/* The Secret with the Redis password (key password), if the gateway logs in with one. */}}
{{- define "mcpgw.redisAuthSecret" -}}
{{- if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecret -}}
{{- else if eq .Values.redis.mode "sentinel" -}}
{{- include "mcpgw.component" (dict "root" . "component" "redis-auth") -}}
{{- end -}}
{{- end -}}

{{/* Arguments of a gateway process inside: its certificate, the admin token, the Redis password. */}}
{{- define "mcpgw.insideArgs" -}}
- --internal-tls=/etc/mcpgw/internal
- --admin-token-file=/etc/mcpgw/admin-token/token
{{- if include "mcpgw.redisAuthSecret" . }}
- --redis-password-file=/etc/mcpgw/redis-auth/password
{{- end }}
{{- if include "mcpgw.redisCaSecret" . }}
- --redis-ca=/etc/mcpgw/redis-ca/{{ ternary .Values.redis.external.caSecret.key "ca.crt" (eq .Values.redis.mode "external") }}
{{- end }}
{{- end -}}

{{/* The Secret with the CA Redis's certificate chains to, if there is one: an external rediss:// Redis's, or the chart's Redis with TLS (key ca.crt). */}}
{{- define "mcpgw.redisCaSecret" -}}
{{- if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.caSecret.name -}}
{{- else if .Values.redis.sentinel.tls.enabled -}}
{{- include "mcpgw.redisTlsSecret" . -}}
{{- end -}}
{{- end -}}

{{/* The Secret (tls.crt, tls.key, ca.crt) the chart's Redis and Sentinels serve TLS with. */}}
{{- define "mcpgw.redisTlsSecret" -}}
{{- default (include "mcpgw.component" (dict "root" . "component" "redis-tls")) .Values.redis.sentinel.tls.existingSecret -}}
{{- end -}}

{{- define "mcpgw.insideMounts" -}}
- { name: internal-tls, mountPath: /etc/mcpgw/internal, readOnly: true }
- { name: admin-token, mountPath: /etc/mcpgw/admin-token, readOnly: true }
{{- if include "mcpgw.redisAuthSecret" .root }}
- { name: redis-auth, mountPath: /etc/mcpgw/redis-auth, readOnly: true }
{{- end }}
{{- if include "mcpgw.redisCaSecret" .root }}
- { name: redis-ca, mountPath: /etc/mcpgw/redis-ca, readOnly: true }
{{- end }}
{{- end -}}

{{- define "mcpgw.insideVolumes" -}}
- name: internal-tls
  secret:
    secretName: {{ include "mcpgw.internalTlsSecret" (dict "root" .root "part" .part) }}
- name: admin-token
  secret:
    secretName: {{ include "mcpgw.adminTokenSecret" .root }}
{{- if include "mcpgw.redisAuthSecret" .root }}
- name: redis-auth
  secret:
    secretName: {{ include "mcpgw.redisAuthSecret" .root }}
{{- end }}
{{- if include "mcpgw.redisCaSecret" .root }}
- name: redis-ca
  secret:
    secretName: {{ include "mcpgw.redisCaSecret" .root }}
{{- end }}
{{- end -}}
