#!/usr/bin/env bash
# A throwaway Kubernetes control plane on loopback: etcd + kube-apiserver (built by
# scripts/bootstrap.sh), static-token admin kubeconfig, RBAC on, free ports.
#
#   control-plane.sh up   [--dir DIR] [--owner-pid PID]   start; prints the kubeconfig path
#   control-plane.sh down [--dir DIR]                      stop and delete DIR
#   control-plane.sh run  [--dir DIR] -- CMD [ARGS...]     start, run CMD with KUBECONFIG set, stop
#   control-plane.sh restart-apiserver --dir DIR           SIGKILL kube-apiserver, start it again
#
# With --owner-pid the control plane stops by itself when that process exits (the Rust test
# harness uses this so a crashed test run leaves nothing behind).
#
# COPYRATOR_KUBECONFIG=/path/to/kubeconfig skips all of this and uses an existing cluster
# (kind, k3d, ...): `up` prints that path, `run` runs CMD against it, `down` does nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COPYRATOR_CACHE:-"$HOME/.cache/copyrator"}
APISERVER=${COPYRATOR_KUBE_APISERVER:-"$CACHE/kube-apiserver-1.20.2"}
ETCD=${COPYRATOR_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}

log() { printf '\033[1m[control-plane]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cmd=${1:-}; shift || true
dir="" owner_pid=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --owner-pid) owner_pid=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument $1" ;;
  esac
done

# A free port below the ephemeral range (32768+): a port from the ephemeral range can be taken
# by an outgoing connection before the server binds it.
free_port() {
  python3 - <<'PY'
import random, socket
for _ in range(1000):
    port = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}

stop() {
  local d=$1
  [ -d "$d" ] || return 0
  for f in watcher apiserver etcd; do
    if [ -f "$d/$f.pid" ]; then
      local pid; pid=$(cat "$d/$f.pid")
      # The watcher runs `down` as its last command, which bash execs in place: never kill
      # ourselves before etcd and the API server are stopped.
      [ "$pid" = "$$" ] && continue
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$d"
}

# The API server's credentials towards webhooks, the Kubernetes way (WebhookAdmission with a
# kubeconfig): every webhook that asks for a client certificate gets one signed by
# $d/webhook-client-ca.crt (what `copyrator serve --client-ca` verifies). Webhooks that do
# not ask are not affected.
webhook_client_credentials() {
  local d=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=copyrator-test webhook client CA" \
    -keyout "$d/webhook-client-ca.key" -out "$d/webhook-client-ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver webhook client" \
    -keyout "$d/webhook-client.key" -out "$d/webhook-client.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$d/webhook-client.ext"
  openssl x509 -req -in "$d/webhook-client.csr" -CA "$d/webhook-client-ca.crt" -CAkey "$d/webhook-client-ca.key" \
    -CAcreateserial -days 7 -extfile "$d/webhook-client.ext" -out "$d/webhook-client.crt" 2>/dev/null
  cat >"$d/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $d/webhook-client.crt
    client-key: $d/webhook-client.key
EOF
  cat >"$d/admission.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $d/webhook-client.kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $d/webhook-client.kubeconfig
EOF
}

start() {
  local d=$1
  [ -x "$APISERVER" ] || die "no kube-apiserver at $APISERVER: run scripts/bootstrap.sh first"
  [ -x "$ETCD" ] || die "no etcd at $ETCD: run scripts/bootstrap.sh first"
  mkdir -p "$d/certs" "$d/etcd"
  local etcd_port etcd_peer api_port token
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
  token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,admin,admin,system:masters" >"$d/tokens.csv"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  webhook_client_credentials "$d"

  "$ETCD" --data-dir "$d/etcd" --name copyrator-test \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "copyrator-test=http://127.0.0.1:$etcd_peer" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 \
    >"$d/etcd.log" 2>&1 &
  echo $! >"$d/etcd.pid"

  echo "etcd_port=$etcd_port api_port=$api_port" >"$d/ports"
  start_apiserver "$d" "$etcd_port" "$api_port"

  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $d/certs/apiserver.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF

  wait_ready "$d"
  # The default namespace exists only once the API server's bootstrap controller made it.
  for _ in $(seq 100); do
    kubectl --kubeconfig "$d/kubeconfig" get namespace default >/dev/null 2>&1 && break
    sleep 0.1
  done

  if [ -n "$owner_pid" ]; then
    # Detached watcher: tears the control plane down when the owner process goes away.
    nohup setsid bash -c "while kill -0 $owner_pid 2>/dev/null && [ -d '$d' ]; do sleep 1; done; '$0' down --dir '$d'" \
      >/dev/null 2>&1 &
    echo $! >"$d/watcher.pid"
  fi
  log "kube-apiserver ready at https://127.0.0.1:$api_port (logs in $d)"
}

start_apiserver() {
  local d=$1 etcd_port=$2 api_port=$3
  "$APISERVER" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" --advertise-address 127.0.0.1 \
    --cert-dir "$d/certs" --token-auth-file "$d/tokens.csv" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --api-audiences https://kubernetes.default.svc \
    --service-cluster-ip-range 10.96.0.0/24 --endpoint-reconciler-type none \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    --admission-control-config-file "$d/admission.yaml" \
    >>"$d/apiserver.log" 2>&1 &
  echo $! >"$d/apiserver.pid"
}

wait_ready() {
  local d=$1 ok=""
  for _ in $(seq 600); do
    if ! kill -0 "$(cat "$d/apiserver.pid")" 2>/dev/null; then
      tail -n 20 "$d/apiserver.log" >&2; stop "$d"; die "kube-apiserver exited"
    fi
    if [ -f "$d/certs/apiserver.crt" ] &&
      kubectl --kubeconfig "$d/kubeconfig" get --raw /readyz >/dev/null 2>&1; then
      ok=1; break
    fi
    sleep 0.1
  done
  [ -n "$ok" ] || { tail -n 20 "$d/apiserver.log" >&2; stop "$d"; die "kube-apiserver not ready after 60s"; }
}

# SIGKILL the API server and start it again on the same port, certificates and etcd (a crash
# and restart, as a test of the clients).
restart_apiserver() {
  local d=$1
  [ -f "$d/ports" ] || die "no control plane in $d"
  local etcd_port api_port
  eval "$(cat "$d/ports")"
  kill -9 "$(cat "$d/apiserver.pid")" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$(cat "$d/apiserver.pid")" 2>/dev/null || break; sleep 0.1; done
  start_apiserver "$d" "$etcd_port" "$api_port"
  wait_ready "$d"
}

default_dir() { echo "${TMPDIR:-/tmp}/copyrator-control-plane.$$"; }

case "$cmd" in
  up)
    if [ -n "${COPYRATOR_KUBECONFIG:-}" ]; then echo "$COPYRATOR_KUBECONFIG"; exit 0; fi
    dir=${dir:-$(default_dir)}
    [ -e "$dir/kubeconfig" ] && die "$dir already holds a control plane"
    start "$dir"
    echo "$dir/kubeconfig"
    ;;
  restart-apiserver)
    [ -n "$dir" ] || die "restart-apiserver needs --dir"
    restart_apiserver "$dir"
    ;;
  down)
    [ -n "${COPYRATOR_KUBECONFIG:-}" ] && [ -z "$dir" ] && exit 0
    [ -n "$dir" ] || die "down needs --dir"
    stop "$dir"
    ;;
  run)
    [ $# -gt 0 ] || die "run needs a command after --"
    if [ -n "${COPYRATOR_KUBECONFIG:-}" ]; then
      KUBECONFIG=$COPYRATOR_KUBECONFIG exec "$@"
    fi
    dir=${dir:-$(default_dir)}
    trap 'stop "$dir"' EXIT INT TERM
    start "$dir"
    rc=0
    KUBECONFIG="$dir/kubeconfig" COPYRATOR_KUBECONFIG="$dir/kubeconfig" "$@" || rc=$?
    exit $rc
    ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
