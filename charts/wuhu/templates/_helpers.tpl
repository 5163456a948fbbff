{{/* The release's name for its objects. */}}
{{- define "wuhu.fullname" -}}
{{- if contains "wuhu" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-wuhu" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the selector labels are a part of them. */}}
{{- define "wuhu.selectorLabels" -}}
app.kubernetes.io/name: wuhu
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wuhu.labels" -}}
{{ include "wuhu.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The worker's pod: one template for the Deployment and the StatefulSet. */}}
{{- define "wuhu.pod" -}}
metadata:
  labels:
    {{- include "wuhu.selectorLabels" . | nindent 4 }}
  annotations:
    checksum/config: {{ include "wuhu.config" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  terminationGracePeriodSeconds: {{ .Values.worker.terminationGracePeriodSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  containers:
    - name: worker
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        {{- range .Values.worker.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      envFrom:
        - configMapRef:
            name: {{ include "wuhu.fullname" . }}
      env:
        - name: WUHU_WORKER_ID
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- if .Values.nats.existingSecret }}
        - name: WUHU_NATS_URL
          valueFrom:
            secretKeyRef:
              name: {{ .Values.nats.existingSecret }}
              key: {{ .Values.nats.key }}
        {{- end }}
        {{- if .Values.nats.passwordSecret.name }}
        - name: WUHU_NATS_PASSWORD
          valueFrom:
            secretKeyRef:
              name: {{ .Values.nats.passwordSecret.name }}
              key: {{ .Values.nats.passwordSecret.key }}
        {{- end }}
        {{- if eq .Values.mode "postgres" }}
        - name: WUHU_STORE
          valueFrom:
            secretKeyRef:
              name: {{ required "postgres.existingSecret is required in postgres mode" .Values.postgres.existingSecret }}
              key: {{ .Values.postgres.key }}
        {{- end }}
        {{- range .Values.providerSecrets }}
        - name: {{ .name }}
          valueFrom:
            secretKeyRef:
              name: {{ .secretName }}
              key: {{ .key }}
        {{- end }}
      ports:
        - name: metrics
          containerPort: {{ .Values.worker.metricsPort }}
          protocol: TCP
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: 5
        timeoutSeconds: 3
        failureThreshold: 2
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - name: config
          mountPath: /etc/wuhu
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- if eq .Values.mode "sqlite" }}
        - name: data
          mountPath: /data
        {{- end }}
        {{- if .Values.nats.credsSecret.name }}
        - name: nats-creds
          mountPath: /etc/wuhu-nats
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "wuhu.fullname" . }}-files
    {{- if .Values.nats.credsSecret.name }}
    - name: nats-creds
      secret:
        secretName: {{ .Values.nats.credsSecret.name }}
        defaultMode: 0400
        items:
          - key: {{ .Values.nats.credsSecret.key }}
            path: fleet.creds
    {{- end }}
    - name: tmp
      emptyDir: {}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The worker's settings, as environment variables (wuhu-worker reads WUHU_*). */}}
{{- define "wuhu.config" -}}
WUHU_PREFIX: {{ .Values.worker.prefix | quote }}
{{- if not .Values.nats.existingSecret }}
WUHU_NATS_URL: {{ .Values.nats.url | quote }}
{{- end }}
{{- with .Values.nats.user }}
WUHU_NATS_USER: {{ . | quote }}
{{- end }}
{{- if .Values.nats.credsSecret.name }}
WUHU_NATS_CREDS: "/etc/wuhu-nats/fleet.creds"
{{- end }}
{{- with .Values.nats.inboxPrefix }}
WUHU_NATS_INBOX_PREFIX: {{ . | quote }}
{{- end }}
{{- if .Values.tenancy.enabled }}
WUHU_TENANCY: "true"
{{- with .Values.tenancy.defaultTenant }}
WUHU_DEFAULT_TENANT: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq .Values.mode "sqlite" }}
WUHU_STORE: "sqlite:///data"
{{- else }}
WUHU_PG_POOL: {{ .Values.postgres.pool | quote }}
WUHU_PG_SCHEMA: {{ .Values.postgres.schema | quote }}
{{- end }}
WUHU_LEASE_TTL_MS: {{ .Values.worker.leaseTtlMs | quote }}
WUHU_PASSIVATE_AFTER: {{ .Values.worker.passivateAfter | quote }}
WUHU_MAX_LOADED_SESSIONS: {{ .Values.worker.maxLoadedSessions | quote }}
WUHU_STORE_THREADS: {{ .Values.worker.storeThreads | quote }}
{{- $limits := dict "maxRequestsInFlight" "WUHU_MAX_REQUESTS_IN_FLIGHT" "maxCommandsPerSession" "WUHU_MAX_COMMANDS_PER_SESSION" "laneMaxItems" "WUHU_LANE_MAX_ITEMS" "laneMaxBytes" "WUHU_LANE_MAX_BYTES" "maxContentBytes" "WUHU_MAX_CONTENT_BYTES" "maxEntryBytes" "WUHU_MAX_ENTRY_BYTES" "retryAfterMs" "WUHU_RETRY_AFTER_MS" "maxInferences" "WUHU_MAX_INFERENCES" "tenantMaxInferences" "WUHU_TENANT_MAX_INFERENCES" "tenantRequestsPerSecond" "WUHU_TENANT_REQUESTS_PER_SECOND" "tenantNewSessionsPerSecond" "WUHU_TENANT_NEW_SESSIONS_PER_SECOND" "tenantMaxSessions" "WUHU_TENANT_MAX_SESSIONS" "pgStatementTimeout" "WUHU_PG_STATEMENT_TIMEOUT" "pgLockTimeout" "WUHU_PG_LOCK_TIMEOUT" "pgIdleInTransactionTimeout" "WUHU_PG_IDLE_IN_TRANSACTION_TIMEOUT" "metricsMaxConnections" "WUHU_METRICS_MAX_CONNECTIONS" "inferenceFirstByteTimeout" "WUHU_INFERENCE_FIRST_BYTE_TIMEOUT" "inferenceIdleTimeout" "WUHU_INFERENCE_IDLE_TIMEOUT" "inferenceTimeout" "WUHU_INFERENCE_TIMEOUT" "summaryFirstByteTimeout" "WUHU_SUMMARY_FIRST_BYTE_TIMEOUT" "summaryIdleTimeout" "WUHU_SUMMARY_IDLE_TIMEOUT" "summaryTimeout" "WUHU_SUMMARY_TIMEOUT" "toolTimeout" "WUHU_TOOL_TIMEOUT" "retryBaseDelay" "WUHU_RETRY_BASE_DELAY" "retryMaxDelay" "WUHU_RETRY_MAX_DELAY" "retryMaxAttempts" "WUHU_RETRY_MAX_ATTEMPTS" "retryMaxServerWait" "WUHU_RETRY_MAX_SERVER_WAIT" }}
{{- range $key, $value := .Values.limits }}
{{- if not (hasKey $limits $key) }}
{{- fail (printf "limits.%s is not one of the worker's limits (docs/operations.md, Limits)" $key) }}
{{- end }}
{{ get $limits $key }}: {{ $value | quote }}
{{- end }}
WUHU_METRICS_ADDR: {{ printf "0.0.0.0:%v" .Values.worker.metricsPort | quote }}
WUHU_CONSOLE: {{ .Values.worker.console | quote }}
{{- if .Values.providers }}
WUHU_PROVIDERS: "/etc/wuhu/providers.json"
{{- end }}
{{- if .Values.tools }}
WUHU_TOOLS: "/etc/wuhu/tools.json"
{{- end }}
{{- end -}}
