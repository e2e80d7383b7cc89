#!/usr/bin/env bash
# Benchmarks (SPEC §7), in one command: a fresh local control plane, copyrator's release build
# against it with the raw API-server limit measured in the same run, then the in-process
# microbenchmarks. Results are printed and written to bench-results/.
#
#   scripts/bench.sh                        full run (~30 min after the first build, and
#                                           bootstrap's ~5 min, estimated)
#   scripts/bench.sh --quick                small sizes, for a smoke run
#   scripts/bench.sh --no-memory            all phases but memory (5,000 namespaces, 50,000
#                                           Secrets) and resync, which runs on its load
#   scripts/bench.sh --phase NAME[,NAME]    only these phases (repeatable): big-payload,
#                                           selector-sources, floods, new-namespace, fanout,
#                                           bundle,
#                                           restore, watch-triggers, admission, pod-gate,
#                                           apiserver-profile, memory, resync, scale,
#                                           tenant-sources, bootstrap, hub; always in that
#                                           order
#   scripts/bench.sh --phase bundle         a CopyRule bundling one Secret of 100 CA
#                                           certificates into a ConfigMap in 500 namespaces
#                                           (--fanout): the source updated -> every copy,
#                                           beside a plain client replacing 500 ConfigMaps of
#                                           the same size; API calls and CPU per round (in the
#                                           default run, ~1 min)
#   scripts/bench.sh --phase scale          the scale curve (~5 min): 1,000 -> 5,000 -> 20,000
#                                           namespaces with 10 and 100 rules, an update fanned
#                                           out to 5,000, fits and extrapolation to 50,000. It
#                                           needs a fresh control plane to itself: the default
#                                           run (no --phase) starts a second one for it
#   scripts/bench.sh --phase tenant-sources an untrusted namespace's 1,000 match-all sources
#                                           (64 KiB annotation each, no namespace consenting)
#                                           at 5,000 and 20,000 namespaces: a fresh process's
#                                           peak RSS and a platform source's update fan-out,
#                                           with and without them. A fresh control plane of
#                                           its own too: the default run starts a third one
#   scripts/bench.sh --phase tenant-edits   1,000 tenant sources with 64-requirement selectors,
#                                           10 namespaces consenting, each edited: copyrator's
#                                           CPU and API calls per edit at 5,000 and 20,000
#                                           namespaces. With the tenant-sources control plane
#                                           in the default run (after tenant-sources)
#   scripts/bench.sh --phase bootstrap      a new namespace's five bootstrap objects (pull
#                                           Secret, RoleBinding, NetworkPolicy, LimitRange,
#                                           ResourceQuota) copied by a copyrator with
#                                           --copy-kinds: time until all five exist beside a
#                                           plain client (200 namespaces), API calls per
#                                           namespace, the Pod gate's added time (100 Pods),
#                                           a fresh process's RSS with 50,000 unrelated
#                                           RoleBindings and 50,000 NetworkPolicies against
#                                           none (~5 min, estimated; 30 s with --quick). A
#                                           fresh control plane of its own too: the default
#                                           run starts a fourth one
#   scripts/bench.sh --phase hub            copies across clusters: one hub and 3 member
#                                           clusters (--members N), each a control plane of
#                                           its own here, members following the hub by
#                                           watches: a hub source update -> every member's
#                                           copy beside the same update copied inside one
#                                           cluster, p50/p99; hub API calls per member per
#                                           update; a member's RSS with 2,000 unrelated hub
#                                           CopyRules (~3 min, estimated). The default run
#                                           starts a fifth control plane for it (member 1)
#   scripts/bench.sh --no-scale             the default run without the scale curve
#   scripts/bench.sh --no-tenant-sources    the default run without tenant-sources
#   scripts/bench.sh --no-bootstrap         the default run without bootstrap
#   scripts/bench.sh --no-hub               the default run without hub
#   scripts/bench.sh --fanout N             namespaces in the fanout and bundle phases (500;
#                                           100 --quick)
#
# The arguments go to the cluster benchmark (benches/cluster/, `cargo bench --bench cluster --
# --help`); --out is set by this script.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
"$ROOT/scripts/bootstrap.sh"
mkdir -p bench-results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="bench-results/cluster-$stamp.md"
{
  echo "# copyrator benchmark $stamp"
  echo
  echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
  echo "- cpu: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | sed 's/^ *//')"
  echo "- kube-apiserver 1.20.2 + etcd $(etcd --version | awk '/etcd Version/ {print $3}') on loopback; copyrator $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- command: scripts/bench.sh $*"
  echo
} >"$out.head"
cargo bench --bench cluster --no-run --quiet
# A fresh control plane for this run only (COPYRATOR_KUBECONFIG is ignored on purpose: the
# memory phase loads 50,000 Secrets into the cluster).
unset COPYRATOR_KUBECONFIG
# --no-scale, --no-tenant-sources and --no-bootstrap are this script's; with --phase the phases
# named are all that run.
args=() scale=1 tenant=1 bootstrap=1 hub=1 quick=()
for a in "$@"; do
  case "$a" in
    --no-scale) scale=0; continue ;;
    --no-tenant-sources) tenant=0; continue ;;
    --no-bootstrap) bootstrap=0; continue ;;
    --no-hub) hub=0; continue ;;
    --phase|--phase=*) scale=0 tenant=0 bootstrap=0 hub=0 ;;
    --quick) quick=(--quick) ;;
  esac
  args+=("$a")
done
"$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${args[@]}" --out "$out.body"
if [ "$scale" = 1 ]; then
  # The scale curve on a second fresh control plane (earlier phases leave objects behind).
  "$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${quick[@]}" --phase scale --out "$out.scale"
  cat "$out.scale" >>"$out.body" && rm -f "$out.scale"
fi
if [ "$tenant" = 1 ]; then
  # tenant-sources on a third fresh control plane: its sizes are its own.
  "$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${quick[@]}" --phase tenant-sources --out "$out.tenant"
  cat "$out.tenant" >>"$out.body" && rm -f "$out.tenant"
  # tenant-edits likewise, on a fresh one again.
  "$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${quick[@]}" --phase tenant-edits --out "$out.edits"
  cat "$out.edits" >>"$out.body" && rm -f "$out.edits"
fi
if [ "$bootstrap" = 1 ]; then
  # bootstrap on a fourth fresh control plane: a copyrator with --copy-kinds of its own, and
  # 100,000 unrelated objects loaded for its memory part.
  "$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${quick[@]}" --phase bootstrap --out "$out.bootstrap"
  cat "$out.bootstrap" >>"$out.body" && rm -f "$out.bootstrap"
fi
if [ "$hub" = 1 ]; then
  # hub on a fifth fresh control plane (member 1); the hub and the other members start their own.
  "$ROOT/scripts/control-plane.sh" run -- cargo bench --bench cluster --quiet -- "${quick[@]}" --phase hub --out "$out.hub"
  cat "$out.hub" >>"$out.body" && rm -f "$out.hub"
fi
cat "$out.head" "$out.body" >"$out" && rm -f "$out.head" "$out.body"
echo "cluster results: $out"
cargo bench --bench micro -- --noplot 2>&1 | grep -E '^[a-z_]+/|time:|thrpt:' | tee "bench-results/micro-$stamp.txt"
