{{/* Names, labels and the pieces every pod of the chart shares. */}}

{{- define "rk.fullname" -}}
{{- printf "%s-%s" .Release.Name .Values.topology.name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "rk.labels" -}}
app.kubernetes.io/name: reliable-kafka
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
reliable-kafka/topology: {{ .Values.topology.name | quote }}
{{- end -}}

{{/* Selector labels of one component ("ackers" or a user's component name). */}}
{{- define "rk.selector" -}}
app.kubernetes.io/name: reliable-kafka
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rk.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rk.commandConfigPath" -}}
/etc/reliable-kafka/{{ .Values.security.propertiesKey }}
{{- end -}}

{{/* The pod name, which the processes take as their stable name (static group membership). */}}
{{- define "rk.podNameEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{- define "rk.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
{{- end -}}

{{/* Volumes: a writable /tmp (the root filesystem is read-only) and the security Secret. */}}
{{- define "rk.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.security.existingSecret }}
- name: kafka-client
  secret:
    secretName: {{ .Values.security.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "rk.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.security.existingSecret }}
- name: kafka-client
  mountPath: /etc/reliable-kafka
  readOnly: true
{{- end }}
{{- end -}}

{{- define "rk.podSpecCommon" -}}
serviceAccountName: {{ include "rk.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
