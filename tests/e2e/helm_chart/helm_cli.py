#!/usr/bin/env python3
"""`helm` as the docs type it, on helm_tool.py (the real Helm SDK), for the front-door tests.

    helm install NAME CHART [-n NS] [--create-namespace] [--version V] [VALUES...]
    helm upgrade NAME CHART [-n NS] [--reuse-values] [--version V] [VALUES...]
    helm rollback NAME [REVISION] [-n NS]
    helm uninstall NAME [-n NS]

The docs' chart, oci://ghcr.io/copyrator/charts/copyrator, is the chart packaged from this
repository ($FRONT_DOOR_CHART): what the release workflow pushes there. The release name
`copyrator` becomes $FRONT_DOOR_RELEASE, so that a test's release never meets another's.
$KUBECONFIG is the test cluster's. Anything else the docs do not use is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OCI_CHART = "oci://ghcr.io/copyrator/charts/copyrator"
TOOL = Path(__file__).with_name("helm_tool.py")


def main(argv: list[str]) -> int:
    if not argv:
        print("helm_cli.py: no command", file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    positional: list[str] = []
    out: list[str] = []
    namespace = "default"
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-n", "--namespace"):
            namespace = rest[i + 1]
            i += 2
            continue
        if arg in ("--set", "--set-string", "--set-json", "-f", "--values"):
            out += [arg, rest[i + 1]]
            i += 2
            continue
        if arg == "--version":
            i += 2  # the packaged chart is the version under test
            continue
        if arg in ("--create-namespace", "--reuse-values"):
            out.append(arg)
            i += 1
            continue
        if arg.startswith("-"):
            print(f"helm_cli.py: {arg} is not used by the docs", file=sys.stderr)
            return 2
        positional.append(arg)
        i += 1
    name = positional[0] if positional else ""
    if name == "copyrator":
        name = os.environ["FRONT_DOOR_RELEASE"]
    release = ["--release", name, "--namespace", namespace, "--kubeconfig", os.environ["KUBECONFIG"]]
    if command in ("install", "upgrade"):
        chart = positional[1] if len(positional) > 1 else ""
        if chart != OCI_CHART:
            print(f"helm_cli.py: chart {chart!r} is not the docs' {OCI_CHART}", file=sys.stderr)
            return 2
        args = [command, os.environ["FRONT_DOOR_CHART"], *release, *out]
    elif command == "rollback":
        args = ["rollback", *release] + (["--revision", positional[1]] if len(positional) > 1 else [])
    elif command == "uninstall":
        args = ["uninstall", *release]
    else:
        print(f"helm_cli.py: helm {command} is not used by the docs", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(TOOL), *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
