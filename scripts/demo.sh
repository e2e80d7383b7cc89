#!/usr/bin/env bash
# The copyrator demo: a throwaway local control plane, copyrator serving its webhooks over TLS,
# a source Secret copied into labelled namespaces while you watch, a namespace bootstrapped
# (NetworkPolicy, RoleBinding) before its first Pod, and a CA bundle of the public CAs. Everything is torn down
# at the end (or on Ctrl-C). First run: installs packages and builds kube-apiserver (~5 min).
#
#   scripts/demo.sh            run the demo
#   DEMO_PAUSE=0 scripts/demo.sh   no pauses between steps (CI)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PAUSE=${DEMO_PAUSE:-1.5}

bold() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }
run() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }
pause() { sleep "$PAUSE"; }

"$ROOT/scripts/bootstrap.sh"
# The dev profile: a cold build takes minutes where the release profile (fat LTO, one codegen
# unit, for the image) takes over twenty on 2 cores, and scripts/test.sh reuses what it builds.
bold "Building copyrator"
cargo build --bin copyrator --quiet
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/copyrator"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/copyrator-demo.XXXXXX")
COPYRATOR_PID=""
cleanup() {
  [ -n "$COPYRATOR_PID" ] && kill "$COPYRATOR_PID" 2>/dev/null && wait "$COPYRATOR_PID" 2>/dev/null
  "$ROOT/scripts/control-plane.sh" down --dir "$WORK/cp" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

bold "Starting a local kube-apiserver + etcd"
export KUBECONFIG
KUBECONFIG=$("$ROOT/scripts/control-plane.sh" up --dir "$WORK/cp")
unset COPYRATOR_KUBECONFIG

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
WEBHOOK_PORT=$(free_port)
HTTP_PORT=$(free_port)

bold "Serving certificate for https://127.0.0.1:$WEBHOOK_PORT (copyrator certs)"
run "$BIN" certs --out "$WORK/certs" --ip 127.0.0.1 --dns localhost

bold "Starting copyrator (sources in 'default' and 'platform' are trusted; others need consent)"
# Beyond Secrets and ConfigMaps: NetworkPolicies and RoleBindings (to ClusterRole admin only).
# The API server calls from 127.0.0.1: its reviews are verified, so Pods get their pull secrets.
"$BIN" serve --kubeconfig "$KUBECONFIG" --trusted-namespaces default,platform \
  --copy-kinds NetworkPolicy.networking.k8s.io,RoleBinding.rbac.authorization.k8s.io \
  --bind-cluster-roles admin \
  --api-server-cidrs 127.0.0.1/32 \
  --webhook-addr "127.0.0.1:$WEBHOOK_PORT" --http-addr "127.0.0.1:$HTTP_PORT" \
  --tls-cert "$WORK/certs/tls.crt" --tls-key "$WORK/certs/tls.key" \
  --leader-election=false --resync-interval 1m >"$WORK/copyrator.log" 2>&1 &
COPYRATOR_PID=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$COPYRATOR_PID" 2>/dev/null || { cat "$WORK/copyrator.log"; exit 1; }
  sleep 0.1
done
echo "copyrator is ready (logs: $WORK/copyrator.log)"

bold "Registering the CopyRule CRD and the webhooks with the API server"
"$BIN" manifests crd | kubectl apply -f -
"$BIN" manifests webhooks --url "https://127.0.0.1:$WEBHOOK_PORT" --ca-bundle "$WORK/certs/ca.crt" \
  --copy-kinds NetworkPolicy.networking.k8s.io,RoleBinding.rbac.authorization.k8s.io | kubectl apply -f -
sleep 1
pause

bold "Two namespaces opt in with the label secret=yes, one does not"
run kubectl create namespace team-a
run kubectl create namespace team-b
run kubectl create namespace team-c
run kubectl label namespace team-a team-b secret=yes
pause

bold "A source Secret in 'default' opts in and selects secret=yes namespaces"
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: registry-cred
  namespace: default
  labels:
    copyrator.io/source: "true"
  annotations:
    copyrator.io/namespace-selector: "secret=yes"
stringData:
  password: hunter2
EOF
sleep 0.5
run kubectl get secrets -A -l app.kubernetes.io/managed-by=copyrator \
  -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,SOURCE:.metadata.annotations.copyrator\\.io/source
pause

bold "A namespace created later gets its copy within milliseconds"
start=$(date +%s%N)
run kubectl create namespace team-d
run kubectl label namespace team-d secret=yes
until kubectl get secret registry-cred -n team-d >/dev/null 2>&1; do sleep 0.02; done
echo "copy present in team-d $(( ($(date +%s%N) - start) / 1000000 )) ms after kubectl create (including two kubectl runs)"
pause

bold "The source changes: every copy follows"
run kubectl patch secret registry-cred -n default --type merge -p '{"stringData":{"password":"correct-horse"}}'
sleep 0.5
for ns in team-a team-b team-d; do
  printf '%s: %s\n' "$ns" "$(kubectl get secret registry-cred -n "$ns" -o jsonpath='{.data.password}' | base64 -d)"
done
pause

bold "Someone deletes a copy by hand: it comes back"
run kubectl delete secret registry-cred -n team-a
sleep 0.5
run kubectl get secret registry-cred -n team-a
pause

bold "team-b opts out: its copy is removed"
run kubectl label namespace team-b secret-
sleep 0.5
run kubectl get secrets -A -l app.kubernetes.io/managed-by=copyrator
pause

bold "A same-name Secret copyrator does not own is never touched (team-c)"
run kubectl create secret generic registry-cred -n team-c --from-literal=password=mine
run kubectl label namespace team-c secret=yes
sleep 0.5
printf 'team-c keeps its own value: %s\n' "$(kubectl get secret registry-cred -n team-c -o jsonpath='{.data.password}' | base64 -d)"
run kubectl get events.events.k8s.io -n default --field-selector reason=CopyConflict -o custom-columns=REASON:.reason,NOTE:.note
pause

bold "A tenant's source in team-c asks for team-a, which has not consented: refused"
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: team-c-notes
  namespace: team-c
  labels:
    copyrator.io/source: "true"
  annotations:
    copyrator.io/namespaces: "team-a"
stringData:
  note: from team-c
EOF
sleep 0.5
run kubectl get secret team-c-notes -n team-a || true
pause

bold "team-a accepts copies from team-c: the copy lands"
run kubectl annotate namespace team-a copyrator.io/accept-from=team-c
sleep 0.5
run kubectl get secret team-c-notes -n team-a
pause

bold "A CopyRule keeps a ConfigMap in sync with one destination namespace"
run kubectl create namespace platform
run kubectl create configmap shared-config -n platform --from-literal=log-level=info
kubectl apply -f - <<'EOF'
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata:
  name: shared-config
spec:
  kind: ConfigMap
  sourceNamespace: platform
  sourceName: shared-config
  namespaces: [team-a]
EOF
sleep 1
run kubectl get configmap shared-config -n team-a -o jsonpath='{.data}'; echo
run kubectl get copyrules
pause

bold "A Pod created the instant after its namespace finds its pull secret (the Pod gate)"
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: pull-cred
  namespace: platform
  labels:
    copyrator.io/source: "true"
  annotations:
    copyrator.io/namespace-selector: "registry=enabled"
    copyrator.io/image-pull-secret: "true"
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{"registry.example":{"auth":"dTpw"}}}'
EOF
# One apply makes the namespace already labelled; no controller-manager runs here, so the
# ServiceAccount the Pod needs is made by hand. The Pod follows at once.
kubectl create namespace ci-1 --dry-run=client -o yaml \
  | kubectl label --local -f - registry=enabled -o yaml | kubectl apply -f -
kubectl create serviceaccount default -n ci-1
run kubectl run app -n ci-1 --image=registry.example/app:1 \
  --overrides='{"spec":{"automountServiceAccountToken":false}}'
run kubectl get pod app -n ci-1 -o jsonpath='{.spec.imagePullSecrets}'; echo
run kubectl get secret pull-cred -n ci-1
pause

bold "A new namespace starts with a default-deny NetworkPolicy and its team's RoleBinding"
kubectl apply -f - <<'EOF'
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: default-deny}
spec:
  apiVersion: networking.k8s.io/v1
  kind: NetworkPolicy
  targetName: default-deny
  namespaceSelector: {matchLabels: {team: "true"}}
  template:
    spec: {podSelector: {}, policyTypes: [Ingress, Egress]}
---
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: team-admins}
spec:
  apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  targetName: team-admins
  namespaceSelector: {matchLabels: {team: "true"}}
  template:
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
    subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "$(namespace)-admins"}]
EOF
# The namespace and its first Pod at once: the Pod gate admits the Pod only once both exist.
kubectl create namespace payments --dry-run=client -o yaml \
  | kubectl label --local -f - team=true -o yaml | kubectl apply -f -
kubectl create serviceaccount default -n payments
run kubectl run api -n payments --image=registry.example/api:1 \
  --overrides='{"spec":{"automountServiceAccountToken":false}}'
run kubectl get networkpolicy,rolebinding -n payments
run kubectl get rolebinding team-admins -n payments -o jsonpath='{.subjects[0].name}'; echo
pause

# In a cluster, the read-only webhook refuses this edit to anyone but copyrator; here kubectl
# and copyrator share one identity, so the edit lands and the copy is put back.
bold "Someone opens the NetworkPolicy: copyrator puts it back"
run kubectl patch networkpolicy default-deny -n payments --type merge -p '{"spec":{"policyTypes":["Ingress"]}}'
sleep 1
run kubectl get networkpolicy default-deny -n payments -o jsonpath='{.spec.policyTypes}'; echo
pause

bold "A CA bundle of the public CAs and your own root, in every team namespace"
kubectl create secret generic corp-root -n platform --from-file=ca.crt="$WORK/certs/ca.crt"
kubectl apply -f - <<'EOF'
apiVersion: copyrator.io/v1alpha1
kind: CopyRule
metadata: {name: trust-bundle}
spec:
  kind: ConfigMap
  sources:
    - {defaultCAs: true}
    - {kind: Secret, namespace: platform, name: corp-root, key: ca.crt}
  targetName: trust-bundle
  target: {key: ca-bundle.pem}
  namespaceSelector: {matchLabels: {team: "true"}}
EOF
until kubectl get configmap trust-bundle -n payments >/dev/null 2>&1; do sleep 0.1; done
printf 'payments/trust-bundle holds %s certificates\n' \
  "$(kubectl get configmap trust-bundle -n payments -o jsonpath='{.data.ca-bundle\.pem}' | grep -c 'BEGIN CERTIFICATE')"
sleep 1
run kubectl get copyrule trust-bundle -o jsonpath='{.status.defaultCAs}'; echo
pause

bold "What copyrator counted"
curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" | grep -E '^copyrator_(copy_writes|admission_requests|jobs|pod_gate)_total' | head -30
echo
echo "Done. Everything is torn down now."
