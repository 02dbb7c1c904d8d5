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

{{/* The claim holding the checkpoint, "" when persistence is off (an emptyDir, local mode only). */}}
{{- define "tidemark.checkpointClaim" -}}
{{- if .Values.checkpoint.persistence.enabled }}
{{- if .Values.checkpoint.persistence.existingClaim }}
{{- .Values.checkpoint.persistence.existingClaim }}
{{- else }}
{{- printf "checkpoint-%s-0" (include "tidemark.fullname" .) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tidemark.checkpoint" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.checkpoint.mountPath) .Values.checkpoint.name }}
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
{{- if and (hasSuffix "SSL" .Values.kafka.securityProtocol) (not .Values.kafka.tls.existingSecret) }}
{{- fail "kafka.securityProtocol SSL/SASL_SSL needs kafka.tls.existingSecret with the CA" }}
{{- end }}
{{- if and (not .Values.program.existingConfigMap) (not .Values.program.inline) }}
{{- fail "set program.inline (the SQL text) or program.existingConfigMap" }}
{{- end }}
{{- if eq .Values.spark.mode "kubernetes" }}
{{- if not .Values.checkpoint.persistence.enabled }}
{{- fail "spark.mode=kubernetes needs the checkpoint on a shared volume: checkpoint.persistence" }}
{{- end }}
{{- if and (not .Values.checkpoint.persistence.existingClaim) (not (has "ReadWriteMany" .Values.checkpoint.persistence.accessModes)) }}
{{- fail "spark.mode=kubernetes: executors write state into the checkpoint, so its volume must be ReadWriteMany (checkpoint.persistence.accessModes) or an existingClaim that is" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Environment shared by the driver container and the executor pod template: Kafka connection and
secrets. Executors decode Kafka input too, so they need the same credentials.
*/}}
{{- define "tidemark.kafkaEnv" -}}
- name: TIDEMARK_BOOTSTRAP_SERVERS
  value: {{ .Values.kafka.bootstrapServers | quote }}
- name: TIDEMARK_KAFKA_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL" .Values.kafka.securityProtocol }}
- name: TIDEMARK_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: TIDEMARK_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: TIDEMARK_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if .Values.kafka.tls.existingSecret }}
- name: TIDEMARK_KAFKA_SSL_CA_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.caKey }}
{{- if .Values.kafka.tls.certKey }}
- name: TIDEMARK_KAFKA_SSL_CERTIFICATE_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.certKey }}
{{- end }}
{{- if .Values.kafka.tls.keyKey }}
- name: TIDEMARK_KAFKA_SSL_KEY_LOCATION
  value: /etc/tidemark/kafka-tls/{{ .Values.kafka.tls.keyKey }}
{{- end }}
{{- if .Values.kafka.tls.keyPasswordKey }}
- name: TIDEMARK_KAFKA_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.tls.existingSecret }}
      key: {{ .Values.kafka.tls.keyPasswordKey }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Kafka TLS Secret as a volume and its mount; callers check kafka.tls.existingSecret. */}}
{{- define "tidemark.kafkaTlsVolume" -}}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}

{{- define "tidemark.kafkaTlsMount" -}}
- name: kafka-tls
  mountPath: /etc/tidemark/kafka-tls
  readOnly: true
{{- end }}
