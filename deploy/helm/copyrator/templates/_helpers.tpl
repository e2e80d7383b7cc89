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

{{/* Where the serving certificate comes from: "copyrator" (issued in-process, the default),
"certManager", or "existingSecret". */}}
{{- define "copyrator.certMode" -}}
{{- if .Values.certManager.enabled -}}
certManager
{{- else if .Values.tls.existingSecret -}}
existingSecret
{{- else -}}
copyrator
{{- end }}
{{- end }}

{{/* The Secret the pods serve the webhooks from: the user's (tls.existingSecret), or the one
copyrator or cert-manager writes. */}}
{{- define "copyrator.tlsSecretName" -}}
{{- $mode := include "copyrator.certMode" . -}}
{{- if eq $mode "existingSecret" -}}
{{- .Values.tls.existingSecret }}
{{- else if eq $mode "certManager" -}}
{{- default (printf "%s-tls" (include "copyrator.fullname" .)) .Values.tls.secretName }}
{{- else -}}
{{- default (printf "%s-webhook-certs" (include "copyrator.fullname" .)) .Values.tls.secretName }}
{{- end }}
{{- end }}

{{- define "copyrator.webhookName" -}}
{{- default (include "copyrator.fullname" .) .Values.webhook.name }}
{{- end }}

{{- define "copyrator.certificateName" -}}
{{- printf "%s-serving" (include "copyrator.fullname" .) }}
{{- end }}

{{/* An image reference from {registry, repository, tag, digest}: the digest wins over the tag.
The registry is left out when the repository names one (a first part with `.` or `:`, or
`localhost`, as the container runtime reads it): values from before `image.registry` still work.
Takes a dict: image (the values block), defaultTag. */}}
{{- define "copyrator.imageRef" -}}
{{- $repo := .image.repository }}
{{- $first := first (splitList "/" $repo) }}
{{- $named := and (contains "/" $repo) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- if and .image.registry (not $named) }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .image.registry) $repo }}
{{- end }}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest }}
{{- else -}}
{{- printf "%s:%s" $repo (default .defaultTag .image.tag) }}
{{- end }}
{{- end }}

{{- define "copyrator.image" -}}
{{- include "copyrator.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{/* DNS names the API server may use for the webhook Service. */}}
{{- define "copyrator.serviceDnsNames" -}}
{{- $svc := include "copyrator.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/* PodDisruptionBudget API: policy/v1 from Kubernetes 1.21, policy/v1beta1 before. Both
tests, because `helm template --kube-version 1.20` still lists policy/v1 among its default
API versions. */}}
{{- define "copyrator.pdbApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}
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

{{/* A list of strings as a YAML flow sequence, `["a", "b"]`, as the templates write them. */}}
{{- define "copyrator.flowList" -}}
{{- $quoted := list -}}
{{- range . -}}
{{- $quoted = append $quoted (quote .) -}}
{{- end -}}
[{{ join ", " $quoted }}]
{{- end }}

{{/* The resources copyrator copies, by API group, as JSON: {"": ["secrets", "configmaps", ...],
"networking.k8s.io": ["networkpolicies"], ...}. Secret and ConfigMap are always copied; copyKinds
adds the others in their order. (Go templates range over a map in key order: the core group
first, then the others sorted, as `copyrator manifests webhooks` orders its rules.) */}}
{{- define "copyrator.copiedResources" -}}
{{- $groups := dict "" (list "secrets" "configmaps") -}}
{{- range .Values.copyKinds -}}
{{- $resources := default (list) (get $groups .group) -}}
{{- $_ := set $groups .group (append $resources .resource | uniq) -}}
{{- end -}}
{{- toJson $groups -}}
{{- end }}

{{/* The value of --copy-kinds: Secret, ConfigMap and copyKinds as `Kind` or `Kind.group`. */}}
{{- define "copyrator.copyKindsFlag" -}}
{{- $names := list "Secret" "ConfigMap" -}}
{{- range .Values.copyKinds -}}
{{- $names = append $names (ternary .kind (printf "%s.%s" .kind .group) (eq .group "")) -}}
{{- end -}}
{{- join "," $names -}}
{{- end }}

{{/* Webhook rules for the resources copyrator copies, one per API group (core: version v1;
others: every version, since `matchPolicy: Equivalent` would send them converted anyway), as
src/manifests.rs kind_rules renders them. Takes a dict: root, operations. */}}
{{- define "copyrator.copiedKindRules" -}}
{{- range $group, $resources := include "copyrator.copiedResources" .root | fromJson }}
- apiGroups: [{{ $group | quote }}]
  apiVersions: [{{ ternary "v1" "*" (eq $group "") | quote }}]
  operations: {{ include "copyrator.flowList" $.operations }}
  resources: {{ include "copyrator.flowList" $resources }}
{{- end }}
{{- end }}

{{/* Settings every webhook shares. Called with (dict "root" $ "ownNamespace" BOOL):
ownNamespace true keeps the release namespace in (the sources webhook: the chart trusts the
inline rules of its own namespace, so their changes must arrive at once). */}}
{{- define "copyrator.webhookSettings" -}}
{{- $root := .root -}}
{{- $excluded := $root.Values.webhook.excludeNamespaces -}}
{{- if not .ownNamespace }}
{{- $excluded = concat $excluded (list $root.Release.Namespace) -}}
{{- end }}
{{- $excluded = $excluded | uniq | sortAlpha -}}
admissionReviewVersions: ["v1"]
{{- if .failClosed }}
# Only copyrator may change a read-only copy: while it cannot answer, no one may, so that an
# edit stripping a copy's marks cannot slip through (SPEC §4 item 11). Nothing else waits on
# it: deletions, namespace deletion included, take the Ignore webhook above.
failurePolicy: Fail
{{- else }}
# copyrator never blocks the cluster: when it is down or slow, the API server goes on.
failurePolicy: Ignore
{{- end }}
matchPolicy: Equivalent
{{- if .readOnly }}
# Queues nothing: a dryRun edit is judged like the edit.
sideEffects: None
{{- else }}
# dryRun requests cause no work.
sideEffects: NoneOnDryRun
{{- end }}
timeoutSeconds: {{ int $root.Values.webhook.timeoutSeconds }}
# Never called for objects in these namespaces.
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ toJson $excluded }}
{{- end }}

{{/* Labels of the `helm test` objects: the release's, without app.kubernetes.io/name, so that
no selector of the release (Deployment, Service, PodDisruptionBudget, NetworkPolicy,
monitors) ever matches the test Pod. */}}
{{- define "copyrator.testLabels" -}}
helm.sh/chart: {{ include "copyrator.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Where an optional object goes: its own `namespace` value, or the release namespace. */}}
{{- define "copyrator.namespaceOr" -}}
{{- default .root.Release.Namespace .namespace }}
{{- end }}

{{/* Fails rendering on combinations of values the schema cannot express. */}}
{{- define "copyrator.validate" -}}
{{- if eq (int .Values.webhook.port) (int .Values.metrics.port) }}
{{- fail (printf "webhook.port and metrics.port must differ (both are %d)" (int .Values.webhook.port)) }}
{{- end }}
{{- if and .Values.hostNetwork (has (int .Values.webhook.port) (list 10250 10255 10256)) }}
{{- fail (printf "webhook.port %d is a kubelet or kube-proxy port on the node: with hostNetwork choose another" (int .Values.webhook.port)) }}
{{- end }}
{{- if and .Values.monitoring.serviceMonitor.enabled .Values.monitoring.podMonitor.enabled }}
{{- fail "monitoring.serviceMonitor.enabled and monitoring.podMonitor.enabled: choose one, or every pod is scraped twice" }}
{{- end }}
{{- if and .Values.tls.existingSecret .Values.certManager.enabled }}
{{- fail "tls.existingSecret and certManager.enabled: choose one source of the serving certificate" }}
{{- end }}
{{- if and .Values.tls.existingSecret (not (contains "-----BEGIN CERTIFICATE-----" .Values.tls.caBundle)) }}
{{- fail "tls.existingSecret needs tls.caBundle: the PEM CA that signed its certificate (the API server checks the webhook's certificate against it)" }}
{{- end }}
{{- if and .Values.tls.caBundle (not .Values.tls.existingSecret) }}
{{- fail "tls.caBundle is only used with tls.existingSecret" }}
{{- end }}
{{- if and .Values.certManager.issuerRef (not .Values.certManager.enabled) }}
{{- fail "certManager.issuerRef is only used with certManager.enabled=true" }}
{{- end }}
{{- range .Values.copyKinds }}
{{- if and (eq .group "") (has .kind (list "Secret" "ConfigMap")) }}
{{- fail (printf "copyKinds: %s is always copied; list only the other kinds" .kind) }}
{{- end }}
{{- end }}
{{- $kinds := include "copyrator.copyKindsFlag" . | splitList "," }}
{{- if and (or .Values.rbac.bindClusterRoles .Values.rbac.bindRoles) (not (has "RoleBinding.rbac.authorization.k8s.io" $kinds)) }}
{{- fail "rbac.bindClusterRoles and rbac.bindRoles are only used when copyKinds has RoleBinding (group rbac.authorization.k8s.io)" }}
{{- end }}
{{- if and .Values.rbac.escalateRoles (not (has "Role.rbac.authorization.k8s.io" $kinds)) }}
{{- fail "rbac.escalateRoles is only used when copyKinds has Role (group rbac.authorization.k8s.io)" }}
{{- end }}
{{- end }}

{{/* "true" when the admission policy on copyrator's own ServiceAccount is rendered:
admissionPolicy.enabled true or false, or "auto": the cluster is Kubernetes >= 1.30 (where
ValidatingAdmissionPolicy v1 is GA and on) and, when Helm knows the cluster's kinds (an install
reads them from discovery, e.g. `v1/Secret`), serves admissionregistration.k8s.io/v1
ValidatingAdmissionPolicy. `helm template` without a cluster knows API groups, not kinds: there
the version decides. */}}
{{- define "copyrator.admissionPolicy" -}}
{{- $enabled := .Values.admissionPolicy.enabled -}}
{{- if eq (toString $enabled) "auto" -}}
{{- $apis := .Capabilities.APIVersions -}}
{{- $served := or ($apis.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (not ($apis.Has "v1/Secret")) -}}
{{- and (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) $served -}}
{{- else -}}
{{- $enabled -}}
{{- end -}}
{{- end }}

{{/* CEL: the object in the variable named by the argument (object or oldObject) exists and
carries copyrator's marks: the ownership label and the two annotations copyrator parses
(copyrator itself also requires them to parse, SPEC §4.5, so this never refuses its own copy). */}}
{{- define "copyrator.cel.marked" -}}
{{ . }} != null && has({{ . }}.metadata.labels) && 'app.kubernetes.io/managed-by' in {{ . }}.metadata.labels && {{ . }}.metadata.labels['app.kubernetes.io/managed-by'] == 'copyrator' && has({{ . }}.metadata.annotations) && 'copyrator.io/source' in {{ . }}.metadata.annotations && 'copyrator.io/rule' in {{ . }}.metadata.annotations
{{- end }}

{{/* CEL: the object in the variable named by the argument exists and carries the annotation
copyrator.io/certificates: managed (src/certs/manager.rs writes no Secret without it). */}}
{{- define "copyrator.cel.certificatesManaged" -}}
{{ . }} != null && has({{ . }}.metadata.annotations) && 'copyrator.io/certificates' in {{ . }}.metadata.annotations && {{ . }}.metadata.annotations['copyrator.io/certificates'] == 'managed'
{{- end }}

{{/*
Where copyrator serves: "cluster" (every namespace, a ClusterRole) or "namespaces" (only
.Values.namespaces, Roles and RoleBindings only: SPEC §13).
*/}}
{{- define "copyrator.scope" -}}
{{- if eq (toString .Values.scope) "namespaces" -}}
{{- if not .Values.namespaces -}}
{{- fail "scope: namespaces needs the namespaces to serve (namespaces: [..])" -}}
{{- end -}}
namespaces
{{- else if eq (toString .Values.scope) "cluster" -}}
cluster
{{- else -}}
{{- fail (printf "scope must be cluster or namespaces, not %q" (toString .Values.scope)) -}}
{{- end -}}
{{- end }}

{{/*
The Role and RoleBinding by which a listed namespace consents to a namespace-scoped copyrator
(SPEC §13): in that namespace only, what copyrator does there. A RoleBinding in a namespace
grants `get` and `watch` of that Namespace object and of no other. Args: root, namespace.
*/}}
{{- define "copyrator.consentRbac" -}}
{{- $root := .root -}}
{{- $fullname := include "copyrator.fullname" $root -}}
{{- $copied := include "copyrator.copiedResources" $root | fromJson -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}
  namespace: {{ .namespace }}
rules:
  # This namespace's labels: read and watched on this Namespace object only.
  - apiGroups: [""]
    resources: ["namespaces"]
    verbs: ["get", "watch"]
  {{- range $group, $resources := $copied }}
  # Sources and copies here: read, watched (metadata), written and deleted (copies only);
  # patch only labels a NamespacedCopyRule's source copyrator.io/source=true, so its watch
  # sees the source's changes.
  - apiGroups: [{{ $group | quote }}]
    resources: {{ include "copyrator.flowList" $resources }}
    verbs: ["get", "list", "watch", "create", "update", "delete", "patch"]
  {{- end }}
  # This namespace's NamespacedCopyRules, where an administrator installed their CRD.
  - apiGroups: ["copyrator.io"]
    resources: ["namespacedcopyrules"]
    verbs: ["get", "list", "watch"]
  # Events about sources here.
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}
  namespace: {{ .namespace }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}
subjects:
  - kind: ServiceAccount
    name: {{ include "copyrator.serviceAccountName" $root }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
