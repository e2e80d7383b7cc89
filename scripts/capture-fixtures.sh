#!/usr/bin/env bash
# Regenerates tests/data/: AdmissionReviews and API error Statuses exactly as the test
# kube-apiserver sends them. A recorder webhook (python, TLS, allows everything) is registered
# for the kinds copyrator reviews; the script makes the changes copyrator reacts to and stores
# each review, then provokes the API errors copyrator classifies and stores their Status.
# Last, copyrator itself runs under a ServiceAccount and the reviews of its own writes are
# stored (review-own-*.json: what the chart's ValidatingAdmissionPolicy must allow, and the
# takeover it must refuse; tests/e2e/helm_chart/admission_policy.rs).
#
#   scripts/control-plane.sh run -- scripts/capture-fixtures.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/tests/data"
work=$(mktemp -d)
cleanup() {
  for f in pid copyrator.pid; do
    [ -f "$work/$f" ] && kill "$(cat "$work/$f")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
: "${KUBECONFIG:?run under scripts/control-plane.sh run --}"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

python3 - "$work" "$port" <<'PY' &
import http.server, json, os, ssl, sys
work, port = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        review = json.loads(body)
        req = review["request"]
        obj = req.get("object") or req.get("oldObject") or {}
        name = "%s-%s-%s" % (req["kind"]["kind"].lower(), req["operation"].lower(),
                             obj.get("metadata", {}).get("name", req.get("name", "")))
        # copyrator's own writes (the second part below): by namespace too, apart.
        if req["userInfo"]["username"].startswith("system:serviceaccount:"):
            name = "own-%s-%s-%s-%s" % (req["kind"]["kind"].lower(), req["operation"].lower(),
                                        req.get("namespace", ""), req.get("name", ""))
        with open(os.path.join(work, "reviews", name + ".json"), "w") as f:
            json.dump(review, f, indent=2, sort_keys=True)
        out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "response": {"uid": req["uid"], "allowed": True}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a): pass
os.makedirs(os.path.join(work, "reviews"), exist_ok=True)
srv = http.server.HTTPServer(("127.0.0.1", port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(work, "cert.pem"), os.path.join(work, "key.pem"))
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(os.path.join(work, "pid"), "w") as f: f.write(str(os.getpid()))
srv.serve_forever()
PY
for _ in $(seq 50); do [ -f "$work/pid" ] && break; sleep 0.1; done

k() { kubectl --kubeconfig "$KUBECONFIG" "$@"; }
k apply -f "$ROOT/deploy/crds/copyrules.copyrator.io.yaml" >/dev/null
k wait --for=condition=Established crd/copyrules.copyrator.io >/dev/null
ca=$(base64 -w0 <"$work/cert.pem")
hook() { # name, resources, operations
  cat <<YAML
  - name: $1.fixtures.copyrator.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    clientConfig: {url: "https://127.0.0.1:$port/", caBundle: "$ca"}
    rules: [{apiGroups: ["$4"], apiVersions: ["*"], resources: [$2], operations: [$3]}]
YAML
}
{
  echo "apiVersion: admissionregistration.k8s.io/v1"
  echo "kind: MutatingWebhookConfiguration"
  echo "metadata: {name: fixtures}"
  echo "webhooks:"
  hook namespaces '"namespaces"' '"CREATE","UPDATE"' ""
  hook objects '"secrets","configmaps"' '"CREATE","UPDATE","DELETE"' ""
  hook pods '"pods"' '"CREATE"' ""
  hook copyrules '"copyrules"' '"CREATE","UPDATE","DELETE"' "copyrator.io"
} | k apply -f - >/dev/null
sleep 1

# Namespaces: one opts in by label at creation, one later.
k create namespace team-a --dry-run=client -o yaml | k label --local -f - copyrator.io/registry=enabled -o yaml | k apply -f - >/dev/null
k create namespace team-b >/dev/null
k label namespace team-b copyrator.io/registry=enabled >/dev/null
# A source Secret with an inline rule, created then changed; a copy being deleted.
k create namespace platform >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Secret
metadata:
  name: registry
  namespace: platform
  labels: {copyrator.io/source: "true"}
  annotations: {copyrator.io/namespace-selector: "copyrator.io/registry=enabled"}
type: Opaque
data: {config.json: eyJhdXRocyI6e319}
YAML
k patch secret registry -n platform -p '{"data":{"config.json":"eyJhdXRocyI6eyJyZWdpc3RyeS5leGFtcGxlIjp7fX19"}}' >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: ConfigMap
metadata:
  name: ca-bundle
  namespace: platform
  labels: {copyrator.io/source: "true"}
  annotations: {copyrator.io/namespace-selector: "copyrator.io/registry=enabled"}
data: {ca.crt: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}
YAML
k create secret generic registry -n team-a --from-literal=config.json='{"auths":{}}' >/dev/null
k delete secret registry -n team-a >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: registry, namespace: platform}
spec:
  kind: Secret
  sourceNamespace: platform
  sourceName: registry
  namespaceSelector: {matchLabels: {copyrator.io/registry: enabled}}
YAML
k create serviceaccount default -n team-a >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: team-a}
spec:
  automountServiceAccountToken: false
  imagePullSecrets: [{name: registry}]
  containers:
  - name: app
    image: registry.example/app:1
    envFrom: [{configMapRef: {name: ca-bundle}}]
    volumeMounts: [{name: creds, mountPath: /creds}]
  volumes:
  - {name: creds, secret: {secretName: registry}}
YAML
k delete mutatingwebhookconfiguration fixtures >/dev/null

# Reviews, with stable names.
mkdir -p "$OUT"
take() { cp "$work/reviews/$1.json" "$OUT/review-$2.json"; }
take namespace-create-team-a namespace-create
take namespace-update-team-b namespace-update-label
take secret-create-registry secret-create-source
take secret-update-registry secret-update-source
take configmap-create-ca-bundle configmap-create-source
take secret-delete-registry secret-delete-copy
take copyrule-create-registry copyrule-create
take pod-create-app pod-create

# API errors: the Status bodies the API server returns, stored verbatim.
server=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
token=$(k config view --minify --raw -o jsonpath='{.users[0].user.token}')
api() { curl -sk -H "Authorization: Bearer $token" -H "content-type: ${type:-application/json}" "$@"; }
status() { python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), indent=2, sort_keys=True))' >"$OUT/status-$1.json"; }
secret='{"apiVersion":"v1","kind":"Secret","metadata":{"name":"registry"},"data":{"a":"YQ=="}}'
api -X POST "$server/api/v1/namespaces/platform/secrets" -d "$secret" | status already-exists
rv=$(k get secret registry -n platform -o jsonpath='{.metadata.resourceVersion}')
k annotate secret registry -n platform touched=yes >/dev/null
api -X PUT "$server/api/v1/namespaces/platform/secrets/registry" \
  -d "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"registry\",\"resourceVersion\":\"$rv\"}}" | status conflict
api -X DELETE "$server/api/v1/namespaces/platform/secrets/registry" \
  -d "{\"preconditions\":{\"resourceVersion\":\"$rv\"}}" | status delete-precondition
k create secret generic frozen -n platform --from-literal=a=a >/dev/null
k patch secret frozen -n platform -p '{"immutable":true}' >/dev/null
type=application/merge-patch+json api -X PATCH \
  "$server/api/v1/namespaces/platform/secrets/frozen" -d '{"data":{"a":"Yg=="}}' | status immutable
k create namespace leaving >/dev/null
k delete namespace leaving --wait=false >/dev/null
api -X POST "$server/api/v1/namespaces/leaving/secrets" -d "$secret" | status namespace-terminating
api "$server/api/v1/namespaces/nowhere/secrets/none" | status not-found
# copyrator's own writes, as the API server admits them: copyrator runs as the ServiceAccount
# the chart names for release `copyrator` in `copyrator-system` (cluster-admin here: what it
# writes is the point, tests/e2e/least_privilege.rs checks its RBAC), issuing its own certificates
# into copyrator-webhook-certs and publishing the CA into its webhook configuration
# `copyrator`. A validating recorder sees each write after every mutation, as a
# ValidatingAdmissionPolicy does.
cargo build -q --bin copyrator
bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug/copyrator"
k create namespace copyrator-system >/dev/null
k create serviceaccount copyrator -n copyrator-system >/dev/null
k create clusterrolebinding copyrator-fixtures --clusterrole=cluster-admin \
  --serviceaccount=copyrator-system:copyrator >/dev/null
k config view --raw --minify >"$work/own.kubeconfig"
kubectl --kubeconfig "$work/own.kubeconfig" config set-credentials copyrator \
  --token="$(k create token copyrator -n copyrator-system)" >/dev/null
kubectl --kubeconfig "$work/own.kubeconfig" config set-context --current --user=copyrator >/dev/null
{
  echo "apiVersion: admissionregistration.k8s.io/v1"
  echo "kind: ValidatingWebhookConfiguration"
  echo "metadata: {name: fixtures-own}"
  echo "webhooks:"
  hook objects '"secrets","configmaps"' '"CREATE","UPDATE","DELETE"' ""
} | k apply -f - >/dev/null
cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
hport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" manifests webhooks --url "https://127.0.0.1:$cport" --name copyrator | k apply -f - >/dev/null
k get validatingwebhookconfiguration copyrator --show-managed-fields -o json >"$work/webhooks-before.json"
k create namespace own-src >/dev/null
"$bin" serve --kubeconfig "$work/own.kubeconfig" \
  --webhook-addr "127.0.0.1:$cport" --http-addr "127.0.0.1:$hport" \
  --tls-secret copyrator-webhook-certs --tls-secret-namespace copyrator-system --tls-ips 127.0.0.1 \
  --webhook-configuration copyrator --cert-check-interval 1s --cert-propagation 2s \
  --lease-namespace copyrator-system --trusted-namespaces own-src --log-level warn \
  >"$work/copyrator.log" 2>&1 &
echo $! >"$work/copyrator.pid"
# Ready once the webhooks trust copyrator's CA: from then on every change reaches it at once.
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null \
    && [ -n "$(k get validatingwebhookconfiguration copyrator -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ] \
    && break
  sleep 0.2
done
k get validatingwebhookconfiguration copyrator --show-managed-fields -o json >"$work/webhooks-after.json"
settle() { sleep 2; }
# An inline rule: copies created in own-a and own-b, replaced when the source changes, deleted
# from own-b when it opts out.
k create namespace own-a >/dev/null && k label namespace own-a own=yes >/dev/null
k create namespace own-b >/dev/null && k label namespace own-b own=yes >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Secret
metadata:
  name: registry
  namespace: own-src
  labels: {copyrator.io/source: "true"}
  annotations: {copyrator.io/namespace-selector: "own=yes"}
type: kubernetes.io/dockerconfigjson
data: {.dockerconfigjson: eyJhdXRocyI6e319}
YAML
settle
k patch secret registry -n own-src -p '{"data":{".dockerconfigjson":"eyJhdXRocyI6eyJyZWdpc3RyeS5leGFtcGxlIjp7fX19"}}' >/dev/null
settle
k label namespace own-b own- >/dev/null
settle
# CopyRules whose sources lack the opt-in label: copyrator adds it. One copies a ConfigMap
# into own-a; the other takes over an unmanaged Secret there (conflictPolicy: Overwrite).
k create configmap ca-bundle -n own-src --from-literal=ca.crt=pem >/dev/null
k label configmap ca-bundle -n own-src team=platform >/dev/null
k create secret generic settings -n own-src --from-literal=level=debug >/dev/null
k create secret generic settings -n own-a --from-literal=level=info >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: ca-bundle}
spec: {kind: ConfigMap, sourceNamespace: own-src, sourceName: ca-bundle, namespaces: [own-a]}
---
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: settings}
spec:
  kind: Secret
  sourceNamespace: own-src
  sourceName: settings
  namespaces: [own-a]
  conflictPolicy: Overwrite
YAML
settle
kill "$(cat "$work/copyrator.pid")" && rm "$work/copyrator.pid"
k delete validatingwebhookconfiguration fixtures-own copyrator >/dev/null
k delete mutatingwebhookconfiguration copyrator --ignore-not-found >/dev/null
own() { cp "$work/reviews/own-$1.json" "$OUT/review-own-$2.json"; }
own secret-create-copyrator-system-copyrator-webhook-certs tls-secret-create
own secret-update-copyrator-system-copyrator-webhook-certs tls-secret-update
own secret-create-own-a-registry copy-create
own secret-update-own-a-registry copy-update
own secret-delete-own-b-registry copy-delete
own configmap-update-own-src-ca-bundle label-source-configmap
own secret-update-own-src-settings label-source-secret
own secret-update-own-a-settings overwrite-unmanaged
# Webhook configurations are never sent to webhooks: the caBundle patch's review is made from
# the configuration before and after it (the object a policy sees keeps the old
# resourceVersion; its generation is already the new one).
python3 - "$work/webhooks-before.json" "$work/webhooks-after.json" >"$OUT/review-own-webhook-cabundle.json" <<'PY'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
gvr = {"group": "admissionregistration.k8s.io", "version": "v1"}
review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "00000000-0000-0000-0000-000000000000",
    "kind": dict(gvr, kind="ValidatingWebhookConfiguration"),
    "resource": dict(gvr, resource="validatingwebhookconfigurations"),
    "requestKind": dict(gvr, kind="ValidatingWebhookConfiguration"),
    "requestResource": dict(gvr, resource="validatingwebhookconfigurations"),
    "name": old["metadata"]["name"], "operation": "UPDATE",
    "userInfo": {"username": "system:serviceaccount:copyrator-system:copyrator",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:copyrator-system",
                            "system:authenticated"]},
    "object": new, "oldObject": old, "dryRun": False,
    "options": {"apiVersion": "meta.k8s.io/v1", "kind": "PatchOptions"}}}
print(json.dumps(review, indent=2, sort_keys=True))
PY
ls "$OUT"
