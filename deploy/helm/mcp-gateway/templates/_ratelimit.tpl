{{/*
The ratelimit service of shared limits (envoyproxy/ratelimit, docs/quotas.md), with rateLimit.enabled:
a container in each Envoy pod. Envoy asks it over a Unix socket in a directory only the two share (no
port opens: docs/adr/0017-closed-inside.md); it counts in the gateway's Redis. Its configuration is
the one the control planes make from the registry, which `mcpgw ratelimit-config-sync` (a sidecar
that starts first) fetches from a control plane's admin and writes into the service's runtime
directory; the service reloads the file when it changes, as beside `mcpgw up`.
*/}}

{{/* Where the socket is, in the Envoy and ratelimit containers alike (the control plane's --ratelimit). */}}
{{- define "mcpgw.rateLimitSocketDir" -}}/run/mcpgw{{- end -}}
{{- define "mcpgw.rateLimitSocket" -}}{{ include "mcpgw.rateLimitSocketDir" . }}/ratelimit.sock{{- end -}}
{{/* The service reads every file of <root>/mcpgw/config/ (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY). */}}
{{- define "mcpgw.rateLimitRuntimeRoot" -}}/ratelimit{{- end -}}
{{- define "mcpgw.rateLimitConfigFile" -}}{{ include "mcpgw.rateLimitRuntimeRoot" . }}/mcpgw/config/mcpgw.yaml{{- end -}}
{{/* Its health check and debug endpoints, on the pod's loopback only. */}}
{{- define "mcpgw.rateLimitHealthPort" -}}8080{{- end -}}
{{- define "mcpgw.rateLimitDebugPort" -}}6070{{- end -}}

{{/* Redis as the service takes it (no URL): REDIS_TYPE and REDIS_URL, from the chart's Redis settings. */}}
{{- define "mcpgw.rateLimitRedis" -}}
{{- if eq .Values.redis.mode "sentinel" -}}
- { name: REDIS_TYPE, value: SENTINEL }
- { name: REDIS_URL, value: {{ printf "%s,%s" .Values.redis.sentinel.primaryName (include "mcpgw.sentinelHosts" .) | quote }} }
{{- else -}}
- { name: REDIS_TYPE, value: {{ .Values.rateLimit.externalRedis.type }} }
- { name: REDIS_URL, value: {{ .Values.rateLimit.externalRedis.url | quote }} }
{{- end }}
- { name: REDIS_SOCKET_TYPE, value: tcp }
{{- if include "mcpgw.redisAuthSecret" . }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: { name: {{ include "mcpgw.redisAuthSecret" . }}, key: password }
{{- $user := ternary .Values.rateLimit.externalRedis.user "" (eq .Values.redis.mode "external") }}
- { name: REDIS_AUTH, value: {{ ternary (printf "%s:$(REDIS_PASSWORD)" $user) "$(REDIS_PASSWORD)" (ne $user "") | quote }} }
{{- if eq .Values.redis.mode "sentinel" }}
# The chart's Sentinels ask for the same password as its Redis.
- { name: REDIS_SENTINEL_AUTH, value: "$(REDIS_PASSWORD)" }
{{- end }}
{{- end }}
{{- if or (and (eq .Values.redis.mode "sentinel") .Values.redis.sentinel.tls.enabled) (and (eq .Values.redis.mode "external") (or .Values.rateLimit.externalRedis.tls .Values.redis.external.caSecret.name)) }}
- { name: REDIS_TLS, value: "true" }
{{- if include "mcpgw.redisCaSecret" . }}
- { name: REDIS_TLS_CACERT, value: /etc/mcpgw/redis-ca/{{ ternary .Values.redis.external.caSecret.key "ca.crt" (eq .Values.redis.mode "external") }} }
{{- end }}
{{- end }}
{{- end -}}

{{/* Started before Envoy and the service (a restartable init container): writes a configuration at once, then follows the control planes'. */}}
{{- define "mcpgw.rateLimitSyncContainer" -}}
- name: ratelimit-config-sync
  image: {{ include "mcpgw.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  restartPolicy: Always
  args:
    - ratelimit-config-sync
    - --control-plane=http://{{ include "mcpgw.serviceHost" (dict "root" . "component" "control-plane") }}:{{ .Values.controlPlane.adminPort }}
    - --admin-token-file=/etc/mcpgw/admin-token/token
    - --output={{ include "mcpgw.rateLimitConfigFile" . }}
    - --interval-ms={{ int64 .Values.rateLimit.syncIntervalMs }}
  env:
    - name: MCPGW_LOG_LEVEL
      value: {{ .Values.logLevel | quote }}
  # The service and Envoy start once a configuration is there (the service does not start without one).
  startupProbe:
    exec:
      command: [test, -s, {{ include "mcpgw.rateLimitConfigFile" . }}]
    periodSeconds: 1
    failureThreshold: 30
  # The pod is ready while the service beside it answers its health check on the pod's loopback (the
  # service's image has no shell or client to probe itself with, and it opens no port on the pod's address).
  readinessProbe:
    exec:
      command: [node, -e, "fetch('http://127.0.0.1:{{ include "mcpgw.rateLimitHealthPort" . }}/healthcheck').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 2
  # Alive while the configuration it keeps is still there.
  livenessProbe:
    exec:
      command: [test, -s, {{ include "mcpgw.rateLimitConfigFile" . }}]
    periodSeconds: 30
  resources:
    {{- toYaml .Values.rateLimit.syncResources | nindent 4 }}
  securityContext:
    {{- include "mcpgw.containerSecurity" . | nindent 4 }}
  volumeMounts:
    - { name: ratelimit-config, mountPath: {{ include "mcpgw.rateLimitRuntimeRoot" . }} }
    - { name: admin-token, mountPath: /etc/mcpgw/admin-token, readOnly: true }
{{- end -}}

{{- define "mcpgw.rateLimitContainer" -}}
- name: ratelimit
  image: {{ printf "%s:%s" .Values.rateLimit.image.repository .Values.rateLimit.image.tag }}
  imagePullPolicy: {{ .Values.rateLimit.image.pullPolicy }}
  command: [/bin/ratelimit]
  # The settings `mcpgw up` runs it with (control-plane/devstack/ratelimit.ts; docs/quotas.md, "Running the ratelimit service").
  env:
    - { name: GRPC_UDS, value: {{ include "mcpgw.rateLimitSocket" . }} }
    - { name: HOST, value: 127.0.0.1 }
    - { name: PORT, value: {{ include "mcpgw.rateLimitHealthPort" . | quote }} }
    - { name: DEBUG_HOST, value: 127.0.0.1 }
    - { name: DEBUG_PORT, value: {{ include "mcpgw.rateLimitDebugPort" . | quote }} }
    - { name: RUNTIME_ROOT, value: {{ include "mcpgw.rateLimitRuntimeRoot" . }} }
    - { name: RUNTIME_SUBDIRECTORY, value: mcpgw }
    - { name: RUNTIME_WATCH_ROOT, value: "false" }
    - { name: RUNTIME_IGNOREDOTFILES, value: "true" }
    - { name: DISABLE_STATS, value: "true" }
    - { name: LOCAL_CACHE_SIZE_IN_BYTES, value: "1048576" }
    - { name: GOGC, value: "400" }
    - { name: LOG_LEVEL, value: warn }
    - { name: LOG_FORMAT, value: json }
    - { name: CACHE_KEY_PREFIX, value: {{ printf "%sratelimit:" .Values.redis.prefix | quote }} }
    {{- include "mcpgw.rateLimitRedis" . | nindent 4 }}
  # No probes of its own: its image has no shell, and its health check is on the pod's loopback (an
  # HTTP port on the pod's address would also take rate limit requests). The config sync's readiness
  # probe asks it; the kubelet restarts it when it exits.
  resources:
    {{- toYaml .Values.rateLimit.resources | nindent 4 }}
  securityContext:
    {{- include "mcpgw.containerSecurity" . | nindent 4 }}
    # Envoy's uid: the socket it creates is writable by its owner only, and Envoy must connect to it.
    runAsUser: 101
    runAsGroup: 101
  volumeMounts:
    - { name: ratelimit-socket, mountPath: {{ include "mcpgw.rateLimitSocketDir" . }} }
    - { name: ratelimit-config, mountPath: {{ include "mcpgw.rateLimitRuntimeRoot" . }}, readOnly: true }
    {{- if include "mcpgw.redisCaSecret" . }}
    - { name: redis-ca, mountPath: /etc/mcpgw/redis-ca, readOnly: true }
    {{- end }}
{{- end -}}

{{- define "mcpgw.rateLimitVolumes" -}}
- name: ratelimit-socket
  emptyDir: {}
- name: ratelimit-config
  emptyDir: {}
{{- if include "mcpgw.redisCaSecret" . }}
- name: redis-ca
  secret:
    secretName: {{ include "mcpgw.redisCaSecret" . }}
{{- end }}
{{- end -}}
