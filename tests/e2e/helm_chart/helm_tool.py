#!/usr/bin/env python3
"""A small `helm` for the chart tests, on the real Helm v4 SDK (PyPI `helm-python-sdk`).

Debian has no helm binary; this drives the same Go code through `helm_python`:

    helm_tool.py lint CHART [--strict] [VALUES...]
    helm_tool.py template CHART --release R --namespace NS [--kubeconfig K] [--notes] [VALUES...]
                          [--kube-version V [--api-versions G/V[/KIND],...]]
    helm_tool.py install CHART --release R --namespace NS --kubeconfig K [--create-namespace] [VALUES...]
    helm_tool.py upgrade CHART --release R --namespace NS --kubeconfig K [--reuse-values] [VALUES...]
    helm_tool.py rollback --release R --namespace NS --kubeconfig K [--revision N]
    helm_tool.py package CHART --destination DIR [--version V] [--app-version V]
    helm_tool.py uninstall --release R --namespace NS --kubeconfig K [--ignore-not-found]
    helm_tool.py test --release R --namespace NS --kubeconfig K [--timeout S]

VALUES are `--values FILE`, `--set k=v`, `--set-string k=v` and `--set-json k=JSON`, merged as
the helm CLI does: values files in order, then the --set flags in order; later wins.

`template` validates the values against values.schema.json first, like `helm template`, then
prints every rendered manifest as one multi-document YAML stream (NOTES.txt only with
--notes). With --kubeconfig it renders against the cluster, so `lookup` sees live objects;
without, `lookup` finds nothing. With --kube-version it renders as `helm template
--kube-version V --api-versions ...` does: an install dry run on the client, whose
`.Capabilities` report that Kubernetes version and Helm's default API versions plus the ones
given (the chart's kubeVersion constraint is checked; hooks are left out, as in a release
manifest). `install` and `upgrade` print a JSON summary of the release (name, namespace,
revision, status, manifest). `test` runs the release's test hooks (`helm test`) and prints
the release summary.

Exit status: 0 on success, 1 when Helm rejects the chart, the values or the operation (the
message, naming the offending field, is on stderr), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import helm_python as helm


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values: maps merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class ValuesAction(argparse.Action):
    """Collects --values/--set* in command-line order, as (kind, argument) pairs."""

    def __call__(self, parser, namespace, value, option_string=None):  # type: ignore[no-untyped-def]
        items = list(getattr(namespace, "value_sources", None) or [])
        items.append((self.dest, value))
        namespace.value_sources = items


def user_values(sources: list[tuple[str, str]]) -> dict[str, Any]:
    files = [arg for kind, arg in sources if kind == "values"]
    flags = [(kind, arg) for kind, arg in sources if kind != "values"]
    values: dict[str, Any] = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            values = deep_merge(values, helm.values_from_yaml(f.read()))
    parse = {
        "set": helm.parse_set_string,
        "set_string": helm.parse_set_string_values,
        "set_json": helm.parse_set_json,
    }
    for kind, arg in flags:
        values = deep_merge(values, parse[kind](arg))
    return values


def add_values_options(p: argparse.ArgumentParser) -> None:
    p.set_defaults(value_sources=[])
    p.add_argument("-f", "--values", action=ValuesAction, metavar="FILE", help="values file")
    p.add_argument("--set", action=ValuesAction, metavar="K=V", help="helm --set expression")
    p.add_argument("--set-string", action=ValuesAction, metavar="K=V", help="values stay strings")
    p.add_argument("--set-json", action=ValuesAction, metavar="K=JSON", help="JSON values")


def add_release_options(p: argparse.ArgumentParser, kubeconfig_required: bool) -> None:
    p.add_argument("--release", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--kubeconfig", required=kubeconfig_required)


def release_summary(release: dict[str, Any]) -> dict[str, Any]:
    return {key: release.get(key) for key in ("name", "namespace", "revision", "status", "manifest")}


def cmd_lint(args: argparse.Namespace) -> int:
    report = helm.lint(
        args.chart,
        user_values(args.value_sources) or None,
        strict=args.strict,
        namespace=args.namespace,
    )
    names = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
    failing = 3 if not args.strict else 2
    failed = False
    for m in report.get("messages") or []:
        severity = int(m.get("severity", 0))
        print(f"[{names.get(severity, severity)}] {m.get('path')}: {m.get('error')}")
        failed |= severity >= failing
    for e in report.get("errors") or []:
        print(f"[ERROR] {e}")
        failed = True
    print(f"{report.get('total_charts_linted', 0)} chart(s) linted, {'failed' if failed else 'ok'}")
    return 1 if failed else 0


def rendered_stream(manifests: dict[str, str], notes: bool) -> str:
    docs = []
    for path in sorted(manifests):
        is_notes = path.endswith("NOTES.txt")
        if is_notes != notes:
            continue
        body = manifests[path].strip("\n")
        if not body.strip():
            continue
        docs.append(body if notes else f"# Source: {path}\n{body}")
    if notes:
        return "\n".join(docs) + "\n"
    return "---\n" + "\n---\n".join(docs) + "\n"


def render_for_kube_version(args: argparse.Namespace, values: dict[str, Any]) -> dict[str, str]:
    """The chart as `helm template --kube-version` renders it (hooks aside).

    The SDK's render functions do not take capabilities; its install action does (options
    `kube_version`, `api_versions`), and a client-side dry run renders without a cluster, as
    `helm template` itself does. Called through the SDK's native entry point because the
    Python wrapper does not pass these two options on.
    """
    from helm_python import _native

    empty_kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"
    opts: dict[str, Any] = {
        "namespace": args.namespace,
        "dry_run": "client",
        "kube_version": args.kube_version,
    }
    if args.api_versions:
        opts["api_versions"] = [v for v in args.api_versions.split(",") if v]
    with helm.Config(kubeconfig_content=empty_kubeconfig, storage_driver="memory") as cfg:
        payload = _native.call_string(
            "helm_install",
            cfg._raw(),
            _native.HANDLE(0),
            _native.HANDLE(0),
            args.chart,
            args.release,
            json.dumps(values),
            json.dumps(opts),
        )
    manifest = json.loads(payload)["manifest"]
    out: dict[str, str] = {}
    for doc in manifest.split("\n---\n"):
        doc = doc.strip().removeprefix("---").strip()
        if not doc:
            continue
        first, _, body = doc.partition("\n")
        path = first.removeprefix("# Source: ") if first.startswith("# Source: ") else "?"
        out[path] = (out[path] + "\n---\n" + body) if path in out else body
    return out


def cmd_template(args: argparse.Namespace) -> int:
    values = user_values(args.value_sources)
    if args.kube_version:
        if args.kubeconfig or args.notes or args.is_upgrade:
            print("--kube-version renders offline, as an install", file=sys.stderr)
            return 2
        with helm.Chart.load(args.chart) as chart:
            chart.validate_schema(values)
        sys.stdout.write(rendered_stream(render_for_kube_version(args, values), False))
        return 0
    with helm.Chart.load(args.chart) as chart:
        # `helm template` validates the merged values against values.schema.json.
        chart.validate_schema(values)
        if args.kubeconfig:
            with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
                manifests = cfg.render(
                    chart,
                    values,
                    name=args.release,
                    namespace=args.namespace,
                    is_install=not args.is_upgrade,
                    is_upgrade=args.is_upgrade,
                )
        else:
            manifests = chart.render(
                values,
                name=args.release,
                namespace=args.namespace,
                is_install=not args.is_upgrade,
                is_upgrade=args.is_upgrade,
            )
    sys.stdout.write(rendered_stream(manifests, args.notes))
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    values = user_values(args.value_sources)
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        if args.command == "install":
            release = cfg.install(
                args.chart,
                args.release,
                values,
                namespace=args.namespace,
                timeout=args.timeout,
                create_namespace=args.create_namespace,
            )
        else:
            release = cfg.upgrade(
                args.chart,
                args.release,
                values,
                namespace=args.namespace,
                timeout=args.timeout,
                reuse_values=args.reuse_values,
            )
    print(json.dumps(release_summary(release)))
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        result = cfg.uninstall(
            args.release, ignore_not_found=args.ignore_not_found, timeout=args.timeout
        )
    print(json.dumps({"info": result.get("info", "")}))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        cfg.rollback(args.release, version=args.revision, timeout=args.timeout)
        release = cfg.status(args.release)
    print(json.dumps(release_summary(release)))
    return 0


def cmd_package(args: argparse.Namespace) -> int:
    path = helm.package(
        args.chart,
        destination=args.destination,
        version=args.version,
        app_version=args.app_version,
    )
    print(path)
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        result = cfg.test(args.release, timeout=args.timeout)
    print(json.dumps({"release": release_summary(result.get("release") or {})}))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="helm_tool.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    lint = sub.add_parser("lint", help="helm lint")
    lint.add_argument("chart")
    lint.add_argument("--strict", action="store_true", help="warnings fail too")
    lint.add_argument("--namespace")
    add_values_options(lint)
    lint.set_defaults(run=cmd_lint)

    template = sub.add_parser("template", help="helm template (schema-validated)")
    template.add_argument("chart")
    add_release_options(template, kubeconfig_required=False)
    template.add_argument("--notes", action="store_true", help="print NOTES.txt only")
    template.add_argument("--is-upgrade", action="store_true", help=".Release.IsUpgrade")
    template.add_argument("--kube-version", help="render for this Kubernetes version (v1.30.0)")
    template.add_argument(
        "--api-versions", help="with --kube-version: more API versions, comma-separated"
    )
    add_values_options(template)
    template.set_defaults(run=cmd_template)

    for name in ("install", "upgrade"):
        action = sub.add_parser(name, help=f"helm {name}")
        action.add_argument("chart")
        add_release_options(action, kubeconfig_required=True)
        action.add_argument("--timeout", type=int, default=60, help="seconds")
        if name == "install":
            action.add_argument("--create-namespace", action="store_true")
        else:
            action.add_argument("--reuse-values", action="store_true")
        add_values_options(action)
        action.set_defaults(run=cmd_install)

    rollback = sub.add_parser("rollback", help="helm rollback")
    add_release_options(rollback, kubeconfig_required=True)
    rollback.add_argument("--revision", type=int, help="default: the previous one")
    rollback.add_argument("--timeout", type=int, default=60, help="seconds")
    rollback.set_defaults(run=cmd_rollback)

    package = sub.add_parser("package", help="helm package")
    package.add_argument("chart")
    package.add_argument("--destination", required=True)
    package.add_argument("--version")
    package.add_argument("--app-version")
    package.set_defaults(run=cmd_package)

    uninstall = sub.add_parser("uninstall", help="helm uninstall")
    add_release_options(uninstall, kubeconfig_required=True)
    uninstall.add_argument("--ignore-not-found", action="store_true")
    uninstall.add_argument("--timeout", type=int, default=60, help="seconds")
    uninstall.set_defaults(run=cmd_uninstall)

    test = sub.add_parser("test", help="helm test")
    add_release_options(test, kubeconfig_required=True)
    test.add_argument("--timeout", type=int, default=120, help="seconds")
    test.set_defaults(run=cmd_test)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (helm.HelmError, OSError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
