#!/usr/bin/env python3
"""Fills and checks copyrator's krew plugin manifest (deploy/krew/copyrator.yaml).

    krew-manifest.py TEMPLATE        fill ${NAME} placeholders from the environment, check the
                                     result, print it (the release workflow's step)
    krew-manifest.py --check FILE    check a filled manifest

The check is krew's own (sigs.k8s.io/krew internal/index/validation ValidatePlugin, and the
strict decoding of its index scanner): apiVersion krew.googlecontainertools.github.com/v1alpha2,
kind Plugin, a safe name equal to the file's, a one-line shortDescription, a `v`-prefixed
semantic version, and per platform a uri, a sha256 of 64 lowercase hex digits, a bin, `files`
absent or non-empty with `from` and `to` each, and a selector on `os`/`arch` only. Exit status 1
names the first problem.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
SAFE_NAME = re.compile(r"^[\w-]+$")
SHA256 = re.compile(r"^[a-f0-9]{64}$")
# github.com/Masterminds/semver, as krew's semver.Parse takes it after the required `v`.
SEMVER = re.compile(
    r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
WINDOWS_FORBIDDEN = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)}
PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+)\}")

# The fields krew's types have: its decoder is strict, so any other is an error.
FIELDS = {
    "plugin": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"version", "shortDescription", "description", "caveats", "homepage", "platforms"},
    "platform": {"head", "uri", "sha256", "selector", "files", "bin"},
    "file": {"from", "to"},
    "selector": {"matchLabels", "matchExpressions"},
}


class Invalid(Exception):
    """The manifest is not one krew accepts; the message says why."""


def known_fields(obj: Any, kind: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise Invalid(f"{kind} must be a mapping")
    unknown = sorted(set(obj) - FIELDS[kind])
    if unknown:
        raise Invalid(f"unknown field(s) in {kind}: {', '.join(unknown)}")
    return obj


def validate(plugin: Any, name: str) -> None:
    """krew's ValidatePlugin(name, plugin), in its order."""
    plugin = known_fields(plugin, "plugin")
    if plugin.get("apiVersion") != API_VERSION:
        raise Invalid(f"apiVersion={plugin.get('apiVersion')!r}, krew supports {API_VERSION!r}")
    if plugin.get("kind") != "Plugin":
        raise Invalid(f"kind={plugin.get('kind')!r}, but only 'Plugin' is supported")
    if not SAFE_NAME.match(name) or name.upper() in WINDOWS_FORBIDDEN:
        raise Invalid(f"the plugin name {name!r} is not allowed, must match {SAFE_NAME.pattern}")
    meta = plugin.get("metadata") or {}
    if meta.get("name") != name:
        raise Invalid(f"plugin should be named {name!r}, not {meta.get('name')!r}")
    spec = known_fields(plugin.get("spec") or {}, "spec")
    short = spec.get("shortDescription") or ""
    if not short:
        raise Invalid("should have a short description")
    if "\r" in short or "\n" in short:
        raise Invalid("should not have line breaks in short description")
    platforms = spec.get("platforms") or []
    if not platforms:
        raise Invalid("should have a platform specified")
    version = spec.get("version")
    if not version:
        raise Invalid("should have a version specified")
    if not isinstance(version, str) or not SEMVER.match(version):
        raise Invalid(f"failed to parse plugin version {version!r} (a semantic version with a leading v)")
    for platform in platforms:
        validate_platform(known_fields(platform, "platform"))


def validate_platform(p: dict[str, Any]) -> None:
    where = f"platform {p.get('selector')}"
    if not p.get("uri"):
        raise Invalid(f"{where}: `uri` has to be set")
    sha = p.get("sha256")
    if not sha:
        raise Invalid(f"{where}: `sha256` sum has to be set")
    if not isinstance(sha, str) or not SHA256.match(sha):
        raise Invalid(f"{where}: `sha256` value {sha} is not valid, must match pattern {SHA256.pattern}")
    if not p.get("bin"):
        raise Invalid(f"{where}: `bin` has to be set")
    files = p.get("files")
    if files is not None:
        if not files:
            raise Invalid(f"{where}: `files` has to be unspecified or non-empty")
        for op in files:
            op = known_fields(op, "file")
            if not op.get("from"):
                raise Invalid(f"{where}: `from` field has to be set")
            if not op.get("to"):
                raise Invalid(f"{where}: `to` field has to be set")
    selector = p.get("selector")
    if selector is None:
        raise Invalid(f"{where}: nil selector is not supported")
    selector = known_fields(selector, "selector")
    labels, exprs = selector.get("matchLabels"), selector.get("matchExpressions")
    if labels is None and not exprs:
        raise Invalid(f"{where}: empty selector is not supported")
    keys = list(labels or {}) + [e.get("key") for e in exprs or []]
    for key in keys:
        if key not in ("os", "arch"):
            raise Invalid(f"{where}: key {key!r} not supported")
    if labels is not None and not labels:
        raise Invalid(f"{where}: `matchLabels` specified but empty")
    if exprs is not None and not exprs:
        raise Invalid(f"{where}: `matchExpressions` specified but empty")


def fill(template: str, env: dict[str, str]) -> str:
    missing = sorted({m for m in PLACEHOLDER.findall(template) if not env.get(m)})
    if missing:
        raise Invalid(f"no value in the environment for {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda m: env[m.group(1)], template)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--check":
        path, text = Path(argv[1]), Path(argv[1]).read_text()
    elif len(argv) == 1:
        path = Path(argv[0])
        try:
            text = fill(path.read_text(), dict(os.environ))
        except Invalid as e:
            print(f"krew-manifest: {path}: {e}", file=sys.stderr)
            return 1
    else:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        validate(yaml.safe_load(text), path.stem)
    except (Invalid, yaml.YAMLError) as e:
        print(f"krew-manifest: {path}: {e}", file=sys.stderr)
        return 1
    if argv[0] != "--check":
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
