{{/* Chart name, truncated to the 63 characters Kubernetes allows in names and labels. */}}
{{- define "tidemark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name. Kept to 40 characters: Spark derives executor pod names
(<name>-exec-<n>) and the StatefulSet's pod and claim names from it.
*/}}
{{- define "tidemark.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tidemark.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tidemark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidemark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tidemark.labels" -}}
helm.sh/chart: {{ include "tidemark.chart" . }}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tidemark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tidemark.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tidemark.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The headless Service: the StatefulSet's governing service and the driver's address. */}}
{{- define "tidemark.headlessName" -}}
{{- printf "%s-driver" (include "tidemark.fullname" .) }}
{{- end }}

{{- define "tidemark.programConfigMap" -}}
{{- default (printf "%s-program" (include "tidemark.fullname" .)) .Values.program.existingConfigMap }}
{{- end }}

{{/* The claim holding the checkpoint, "" when persistence is off (an emptyDir, local mode only)
or the checkpoint is an object-store URL. */}}
{{- define "tidemark.checkpointClaim" -}}
{{- if and .Values.checkpoint.persistence.enabled (not .Values.checkpoint.url) }}
{{- if .Values.checkpoint.persistence.existingClaim }}
{{- .Values.checkpoint.persistence.existingClaim }}
{{- else }}
{{- printf "checkpoint-%s-0" (include "tidemark.fullname" .) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tidemark.checkpoint" -}}
{{- printf "%s/%s" (trimSuffix "/" (.Values.checkpoint.url | default .Values.checkpoint.mountPath)) .Values.checkpoint.name }}
{{- end }}

{{/*
The object store of an s3a:// checkpoint, for the driver container and the executor pod
template: Tidemark's own client and Spark's s3a filesystem read these (app/config.py
ObjectStore, TIDEMARK_S3_*; AWS_* from the Secret by reference, never a value in the spec).
*/}}
{{- define "tidemark.objectStoreEnv" -}}
{{- if .Values.checkpoint.url }}
{{- $s3 := .Values.checkpoint.s3 }}
{{- with $s3.endpoint }}
- name: TIDEMARK_S3_ENDPOINT
  value: {{ trimSuffix "/" . | quote }}
{{- end }}
{{- with $s3.region }}
- name: TIDEMARK_S3_REGION
  value: {{ . | quote }}
{{- end }}
- name: TIDEMARK_S3_PATH_STYLE
  value: {{ $s3.pathStyle | toString | quote }}
- name: TIDEMARK_S3_LEASE_SECONDS
  value: {{ $s3.leaseSeconds | toString | quote }}
{{- with $s3.jars }}
- name: TIDEMARK_S3_JARS
  value: {{ . | quote }}
{{- end }}
{{- with $s3.credentials.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $s3.credentials.accessKeyIdKey | quote }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $s3.credentials.secretAccessKeyKey | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The object store's port for the NetworkPolicy: the endpoint's, else 443 (AWS S3). */}}
{{- define "tidemark.objectStorePorts" -}}
{{- $endpoint := .Values.checkpoint.s3.endpoint }}
{{- if $endpoint }}
{{- $url := urlParse $endpoint }}
{{- if contains ":" $url.host }}
{{- toJson (list (atoi (last (splitList ":" $url.host)))) }}
{{- else }}
{{- toJson (list (ternary 80 443 (eq $url.scheme "http"))) }}
{{- end }}
{{- else }}
{{- toJson (list 443) }}
{{- end }}
{{- end }}

{{/* Settings the chart refuses, with the reason, before anything is applied. */}}
{{- define "tidemark.validate" -}}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9._-]*$" (toString .Values.checkpoint.name)) }}
{{- fail "checkpoint.name must be a plain directory name (letters, digits, . _ -)" }}
{{- end }}
{{- if not (has .Values.spark.mode (list "local" "kubernetes")) }}
{{- fail (printf "spark.mode must be local or kubernetes, not %q" .Values.spark.mode) }}
{{- end }}
{{- if and (hasPrefix "SASL" .Values.kafka.securityProtocol) (or (not .Values.kafka.sasl.mechanism) (not .Values.kafka.sasl.existingSecret)) }}
{{- fail "kafka.securityProtocol SASL_* needs kafka.sasl.mechanism and kafka.sasl.existingSecret" }}
{{- end }}
{{- if and (hasPrefix "SASL" .Values.kafka.securityProtocol) (eq .Values.kafka.sasl.mechanism "OAUTHBEARER") (or (not .Values.kafka.sasl.oauthbearer.tokenEndpointUrl) (not .Values.kafka.sasl.oauthbearer.clientId)) }}
{{- fail "kafka.sasl.mechanism OAUTHBEARER needs kafka.sasl.oauthbearer.tokenEndpointUrl and kafka.sasl.oauthbearer.clientId" }}
{{- end }}
{{- range .Values.secretFiles }}
{{- if not (and .name .existingSecret .key .env) }}
{{- fail "each of secretFiles needs name, existingSecret, key and env" }}
{{- end }}
{{- if not (regexMatch "^TIDEMARK_[A-Z0-9_]+_FILE$" .env) }}
{{- fail (printf "secretFiles %s: env must be a TIDEMARK_*_FILE setting, not %q" .name .env) }}
{{- end }}
{{- end }}
{{- range $key, $_ := .Values.kafka.client }}
{{- if regexMatch "(?i)password|secret|token" $key }}
{{- fail (printf "kafka.client %s looks like a secret: its value would be plain in the pod spec; mount it with secretFiles or kafka.sasl/kafka.tls" $key) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor and metrics.podMonitor would both scrape the driver (every series twice): enable one" }}
{{- end }}
{{- if and (not .Values.program.existingConfigMap) (not .Values.program.inline) }}
{{- fail "set program.inline (the SQL text) or program.existingConfigMap" }}
{{- end }}
{{- if and (eq .Values.spark.mode "kubernetes") (not .Values.checkpoint.url) }}
{{- if not .Values.checkpoint.persistence.enabled }}
{{- fail "spark.mode=kubernetes needs the checkpoint on a shared volume (checkpoint.persistence) or in an object store (checkpoint.url)" }}
{{- end }}
{{- if and (not .Values.checkpoint.persistence.existingClaim) (not (has "ReadWriteMany" .Values.checkpoint.persistence.accessModes)) }}
{{- fail "spark.mode=kubernetes: executors write state into the checkpoint, so its volume must be ReadWriteMany (checkpoint.persistence.accessModes) or an existingClaim that is" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Environment shared by the driver container and the executor pod template: Kafka connection and
the files holding its secrets (tidemark.secretMounts mounts them). Executors make Kafka clients
too, so they get the same settings and files.
*/}}
{{- define "tidemark.kafkaEnv" -}}
- name: TIDEMARK_BOOTSTRAP_SERVERS
  value: {{ .Values.kafka.bootstrapServers | quote }}
- name: TIDEMARK_KAFKA_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL" .Values.kafka.securityProtocol }}
- name: TIDEMARK_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
{{- if eq .Values.kafka.sasl.mechanism "OAUTHBEARER" }}
{{- with .Values.kafka.sasl.oauthbearer }}
- name: TIDEMARK_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL
  value: {{ .tokenEndpointUrl | quote }}
- name: TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_ID
  value: {{ .clientId | quote }}
- name: TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE
  value: /etc/tidemark/secrets/kafka-sasl/{{ .clientSecretKey }}
{{- with .scope }}
- name: TIDEMARK_KAFKA_SASL_OAUTHBEARER_SCOPE
  value: {{ . | quote }}
{{- end }}
{{- with .extensions }}
- name: TIDEMARK_KAFKA_SASL_OAUTHBEARER_EXTENSIONS
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- else }}
- name: TIDEMARK_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: TIDEMARK_KAFKA_SASL_PASSWORD_FILE
  value: /etc/tidemark/secrets/kafka-sasl/{{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- end }}
{{- if .Values.kafka.tls.existingSecret }}
{{- if .Values.kafka.tls.caKey }}
- name: TIDEMARK_KAFKA_SSL_CA_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.caKey }}
{{- end }}
{{- if .Values.kafka.tls.certKey }}
- name: TIDEMARK_KAFKA_SSL_CERTIFICATE_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.certKey }}
{{- end }}
{{- if .Values.kafka.tls.keyKey }}
- name: TIDEMARK_KAFKA_SSL_KEY_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.keyKey }}
{{- end }}
{{- if .Values.kafka.tls.keyPasswordKey }}
- name: TIDEMARK_KAFKA_SSL_KEY_PASSWORD_FILE
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.keyPasswordKey }}
{{- end }}
{{- end }}
{{- with .Values.kafka.client }}
- name: TIDEMARK_KAFKA_CLIENT
  value: {{ toJson . | quote }}
{{- end }}
{{- range .Values.secretFiles }}
- name: {{ .env }}
  value: /etc/tidemark/secrets/{{ .name }}/{{ .key }}
{{- end }}
{{- end }}

{{/* The key of the Secret Spark's RPC authentication reads (kubernetes mode). */}}
{{- define "tidemark.sparkAuthSecret" -}}
{{- default (printf "%s-spark-auth" (include "tidemark.fullname" .)) .Values.spark.auth.existingSecret }}
{{- end }}

{{- define "tidemark.sparkAuthFile" -}}
{{- printf "/etc/tidemark/secrets/spark-auth/%s" .Values.spark.auth.secretKey }}
{{- end }}

{{/* Secrets as files: volumes and mounts of the driver and the executor pod template. Only the
keys named in values are projected, read-only, readable by the pod's group only. */}}
{{- define "tidemark.secretVolumes" -}}
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if hasPrefix "SASL" .Values.kafka.securityProtocol }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.kafka.sasl.existingSecret }}
    defaultMode: 0440
    items:
      {{- $key := ternary .Values.kafka.sasl.oauthbearer.clientSecretKey .Values.kafka.sasl.passwordKey (eq .Values.kafka.sasl.mechanism "OAUTHBEARER") }}
      - key: {{ $key }}
        path: {{ $key }}
{{- end }}
{{- if and .Values.spark.auth.enabled (eq .Values.spark.mode "kubernetes") }}
- name: spark-auth
  secret:
    secretName: {{ include "tidemark.sparkAuthSecret" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.spark.auth.secretKey }}
        path: {{ .Values.spark.auth.secretKey }}
{{- end }}
{{- range .Values.secretFiles }}
- name: secret-{{ .name }}
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end }}

{{- define "tidemark.secretMounts" -}}
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/tidemark/kafka-tls
  readOnly: true
{{- end }}
{{- if hasPrefix "SASL" .Values.kafka.securityProtocol }}
- name: kafka-sasl
  mountPath: /etc/tidemark/secrets/kafka-sasl
  readOnly: true
{{- end }}
{{- if and .Values.spark.auth.enabled (eq .Values.spark.mode "kubernetes") }}
- name: spark-auth
  mountPath: /etc/tidemark/secrets/spark-auth
  readOnly: true
{{- end }}
{{- range .Values.secretFiles }}
- name: secret-{{ .name }}
  mountPath: /etc/tidemark/secrets/{{ .name }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The TCP ports of kafka.bootstrapServers (host:port,...), as a JSON list. */}}
{{- define "tidemark.kafkaPorts" -}}
{{- $ports := list }}
{{- range splitList "," .Values.kafka.bootstrapServers }}
{{- $server := trim . }}
{{- if $server }}
{{- $ports = append $ports (atoi (last (splitList ":" $server))) }}
{{- end }}
{{- end }}
{{- toJson (uniq $ports) }}
{{- end }}

{{/* The port of the OIDC token endpoint URL, as a JSON list. */}}
{{- define "tidemark.oidcPorts" -}}
{{- $url := urlParse .Values.kafka.sasl.oauthbearer.tokenEndpointUrl }}
{{- $host := $url.host }}
{{- if contains ":" $host }}
{{- toJson (list (atoi (last (splitList ":" $host)))) }}
{{- else }}
{{- toJson (list (ternary 80 443 (eq $url.scheme "http"))) }}
{{- end }}
{{- end }}

{{/* The `job` label of the release's series: both monitors set it, rules and dashboard
select by it (with the namespace). */}}
{{- define "tidemark.job" -}}
{{- default (include "tidemark.fullname" .) .Values.metrics.job }}
{{- end }}

{{/* Relabelings of the ServiceMonitor's and PodMonitor's endpoint: the job and release labels
the alert rules and the dashboard select by, whichever monitor scrapes. */}}
{{- define "tidemark.scrapeRelabelings" -}}
- action: replace
  targetLabel: job
  replacement: {{ include "tidemark.job" . | quote }}
- action: replace
  targetLabel: release
  replacement: {{ .Release.Name | quote }}
{{- end }}

{{/* The Grafana dashboard's uid: readable namespace and release, and a hash of both so two
releases never share one after truncation; at most Grafana's 40 characters. */}}
{{- define "tidemark.dashboardUid" -}}
{{- $key := printf "%s/%s" .Release.Namespace .Release.Name }}
{{- $readable := printf "tm-%s-%s" .Release.Namespace .Release.Name | trunc 31 | trimSuffix "-" }}
{{- printf "%s-%s" $readable (sha256sum $key | trunc 8) }}
{{- end }}

{{/* The label matchers that scope a PromQL selector to this release's series. */}}
{{- define "tidemark.seriesMatchers" -}}
{{- printf "namespace=%q, job=%q" .Release.Namespace (include "tidemark.job" .) }}
{{- end }}

{{/* The URL of the release's metrics endpoint inside the cluster (helm test). */}}
{{- define "tidemark.metricsUrl" -}}
{{- $service := ternary (printf "%s-metrics" (include "tidemark.fullname" .)) (include "tidemark.headlessName" .) .Values.metrics.service.enabled }}
{{- printf "http://%s.%s.svc:%d" $service .Release.Namespace (int .Values.metrics.port) }}
{{- end }}
