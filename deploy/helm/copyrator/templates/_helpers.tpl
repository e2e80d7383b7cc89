{{/* Chart name, overridable. */}}
{{- define "copyrator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the Service, Deployment, RBAC objects and the Lease are named after it. */}}
{{- define "copyrator.fullname" -}}
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

{{- define "copyrator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "copyrator.labels" -}}
helm.sh/chart: {{ include "copyrator.chart" . }}
{{ include "copyrator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "copyrator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "copyrator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "copyrator.serviceAccountName" -}}
{{- default (include "copyrator.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "copyrator.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "copyrator.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{- define "copyrator.webhookName" -}}
{{- default (include "copyrator.fullname" .) .Values.webhook.name }}
{{- end }}

{{- define "copyrator.certificateName" -}}
{{- printf "%s-serving" (include "copyrator.fullname" .) }}
{{- end }}

{{- define "copyrator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* DNS names the API server may use for the webhook Service. */}}
{{- define "copyrator.serviceDnsNames" -}}
{{- $svc := include "copyrator.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/* PodDisruptionBudget API: policy/v1 from Kubernetes 1.21, policy/v1beta1 before. */}}
{{- define "copyrator.pdbApiVersion" -}}
{{- if .Capabilities.APIVersions.Has "policy/v1" -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end }}
{{- end }}

{{/* clientConfig of one webhook: the Service on port 443, a path, and the CA unless
cert-manager injects it. Takes a dict: caBundle (base64), service, namespace, path. */}}
{{- define "copyrator.webhookClientConfig" -}}
clientConfig:
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
  service:
    name: {{ .service }}
    namespace: {{ .namespace }}
    path: {{ .path }}
    port: 443
{{- end }}

{{/* Settings every webhook shares. */}}
{{- define "copyrator.webhookSettings" -}}
{{- $excluded := concat .Values.webhook.excludeNamespaces (list .Release.Namespace) | uniq | sortAlpha -}}
admissionReviewVersions: ["v1"]
# copyrator never blocks the cluster: when it is down or slow, the API server goes on.
failurePolicy: Ignore
matchPolicy: Equivalent
# dryRun requests cause no work.
sideEffects: NoneOnDryRun
timeoutSeconds: {{ int .Values.webhook.timeoutSeconds }}
# Never called for objects in these namespaces (the release namespace among them).
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ toJson $excluded }}
{{- end }}
