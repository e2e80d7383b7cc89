#!/usr/bin/env bash
# Regenerates tests/data/: AdmissionReviews and API error Statuses exactly as the test
# kube-apiserver sends them. A recorder webhook (python, TLS, allows everything) is registered
# for the kinds copyrator reviews; the script makes the changes copyrator reacts to and stores
# each review, then provokes the API errors copyrator classifies and stores their Status.
#
#   scripts/control-plane.sh run -- scripts/capture-fixtures.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/tests/data"
work=$(mktemp -d)
trap 'kill "$(cat "$work/pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"' EXIT
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
ls "$OUT"
