#!/usr/bin/env bash
# Memory and API calls of copyrator cluster-wide beside --namespaces (SPEC §13): L listed
# namespaces of N (default 50 of 5,000), one source copied into the other L-1, admin identity.
# Run inside a throwaway control plane (BENCHMARKS.md):
#   scripts/control-plane.sh run --dir /tmp/nsbench-cp -- scripts/bench-namespaces.sh
set -euo pipefail
BIN=${BIN:-target/debug/copyrator}
W=$(mktemp -d)
N=${N:-5000}
L=${L:-50}
python3 - "$N" > $W/ns.yaml <<'PY'
import sys
n=int(sys.argv[1])
print("apiVersion: v1\nkind: List\nitems:")
for i in range(n):
    print(f"- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: nsb-{i}")
PY
start=$(date +%s.%N)
kubectl create -f $W/ns.yaml > /dev/null
echo "created $N namespaces in $(echo "$(date +%s.%N) - $start" | bc) s"
targets=$(seq -s, 1 $((L-1)) | sed 's/\([0-9]\+\)/nsb-\1/g')
kubectl -n nsb-0 create secret generic cred --from-literal=token=v1 > /dev/null
kubectl -n nsb-0 label secret cred copyrator.io/source=true > /dev/null
kubectl -n nsb-0 annotate secret cred copyrator.io/namespaces="$targets" > /dev/null
listed=nsb-0,$targets
$BIN certs --ip 127.0.0.1 --out $W/certs > /dev/null
measure() {
  mode=$1; shift
  $BIN serve --kubeconfig "$KUBECONFIG" --webhook-addr 127.0.0.1:18443 --http-addr 127.0.0.1:19090 \
    --tls-cert $W/certs/tls.crt --tls-key $W/certs/tls.key --trusted-namespaces '*' \
    --leader-election=false --resync-interval 1h "$@" > $W/$mode.log 2>&1 &
  pid=$!
  t0=$(date +%s.%N)
  until curl -sf 127.0.0.1:19090/readyz > /dev/null; do sleep 0.1; done
  ready=$(echo "$(date +%s.%N) - $t0" | bc)
  sleep 5
  copies=$(kubectl get secrets -A -l app.kubernetes.io/managed-by=copyrator --no-headers 2>/dev/null | wc -l)
  rss=$(grep VmRSS /proc/$pid/status | awk '{print $2}')
  hwm=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
  calls=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_requests_total/ {s+=$2} END {print s}')
  bytes=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_response_bytes_total/ {s+=$2} END {print s}')
  lists=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_requests_total\{.*verb="list"/ {s+=$2} END {print s}')
  watches=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_requests_total\{.*verb="watch"/ {s+=$2} END {print s}')
  gets=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_requests_total\{.*verb="get"/ {s+=$2} END {print s}')
  sleep 30
  later=$(curl -s 127.0.0.1:19090/metrics | awk '/^copyrator_api_requests_total/ {s+=$2} END {print s}')
  rss30=$(grep VmRSS /proc/$pid/status | awk '{print $2}')
  echo "$mode: 30 s later: API requests +$((later - calls)), RSS ${rss30} kB; threads $(ls /proc/$pid/task | wc -l), sockets $(ls -l /proc/$pid/fd | grep -c socket)"
  echo "$mode: ready ${ready}s, copies $copies, RSS ${rss} kB (peak ${hwm} kB), API requests $calls (list $lists, watch $watches, get $gets), response bytes $bytes"
  kill $pid; wait $pid || true
  kubectl delete secrets -A -l app.kubernetes.io/managed-by=copyrator > /dev/null 2>&1 || true
  sleep 1
}
measure cluster-wide
measure namespaces --namespaces "$listed"
