#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit tests, and end-to-end tests
# against a real kube-apiserver + etcd started for this run (or the cluster in
# COPYRATOR_KUBECONFIG). First run: installs packages and builds kube-apiserver (~5 min).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

step() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }

"$ROOT/scripts/bootstrap.sh"

# A cold run writes about 9 GB under target/ (a clean clone's .ci/run: 8.7 GB, 5.4 of them
# after clippy and the test build). Say so before the build fails on it.
need_gb=10
target=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$target"
free_gb=$(df -Pk "$target" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
if [ "$free_gb" -lt "$need_gb" ]; then
  printf 'warning: %s GB free for %s; a cold run needs about %s GB (builds fail with "No space left on device")\n' \
    "$free_gb" "$target" "$need_gb" >&2
fi

# The release workflow runs only on GitHub; what can be checked here is checked before any build.
step "release workflow: actionlint (with shellcheck), zizmor"
PATH="$ROOT/.venv/bin:$PATH" actionlint .github/workflows/*.yml
"$ROOT/.venv/bin/zizmor" --offline --persona pedantic --quiet .github/workflows/

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

if cargo nextest --version >/dev/null 2>&1; then
  unit=(cargo nextest run --workspace --lib --bins)
  # .config/nextest.toml runs end-to-end tests one at a time (they share one API server).
  e2e=(cargo nextest run --test e2e --no-fail-fast)
else
  unit=(cargo test --workspace --lib --bins)
  e2e=(cargo test --test e2e --no-fail-fast -- --test-threads=1)
fi

step "cargo doc (broken links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "unit tests"
"${unit[@]}"

step "end-to-end tests (real kube-apiserver, real admission calls over TLS)"
cargo build --tests --bins --quiet
"$ROOT/scripts/control-plane.sh" run -- "${e2e[@]}"

step "all tests passed"
