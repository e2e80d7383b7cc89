#!/usr/bin/env python3
"""Writes the values table of the chart README from the comments in values.yaml.

    .venv/bin/python scripts/chart-values-table.py           # rewrite the table in README.md
    .venv/bin/python scripts/chart-values-table.py --check   # exit 1 if README.md is stale
    ... [--chart DIR]                                          # another chart directory

The comment convention is helm-docs': `# -- text` right above a key documents it (following
`#` lines continue the text); `# @default -- text` says what an empty default means. A key
documented this way covers the keys below it. Every value must be covered: an undocumented
one is an error, so the table is always complete. Defaults are read by Helm's own YAML
parser (helm-python-sdk, installed by scripts/bootstrap.sh), or PyYAML where that is missing.

The table sits in README.md between the BEGIN and END markers below.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy/helm/copyrator"
BEGIN = "<!-- BEGIN values table: scripts/chart-values-table.py writes it from values.yaml -->"
END = "<!-- END values table -->"

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")


def load_values(text: str) -> dict[str, Any]:
    try:
        import helm_python

        return helm_python.values_from_yaml(text)
    except ImportError:
        import yaml  # type: ignore[import-untyped]

        return yaml.safe_load(text) or {}


class Doc:
    def __init__(self, path: str, description: str, default: str | None) -> None:
        self.path = path
        self.description = description
        self.default = default


def documented_keys(text: str) -> list[Doc]:
    """The `# --` comments of values.yaml and the key path each one documents."""
    docs: list[Doc] = []
    stack: list[tuple[int, str]] = []
    description: list[str] | None = None
    default: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            body = stripped[1:].strip()
            if body.startswith("@default --"):
                default = body.removeprefix("@default --").strip()
            elif body.startswith("--"):
                description = [body.removeprefix("--").strip()]
            elif description is not None:
                description.append(body)
            continue
        if not stripped:
            description, default = None, None
            continue
        match = KEY.match(line)
        if not match:
            # A list item or a continued value: no key here.
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(k for _, k in stack)
        if description is not None:
            docs.append(Doc(path, " ".join(description).strip(), default))
        elif default is not None:
            sys.exit(f"values.yaml:{number}: `# @default --` without a `# --` description")
        description, default = None, None
    return docs


def lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node[part]
    return node


def leaves(values: Any, prefix: str = "") -> list[str]:
    """Paths of the values that hold no further keys (scalars, lists, empty maps)."""
    if isinstance(values, dict) and values:
        out = []
        for key, value in values.items():
            out.extend(leaves(value, f"{prefix}.{key}" if prefix else key))
        return out
    return [prefix]


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(values_text: str) -> str:
    values = load_values(values_text)
    docs = documented_keys(values_text)
    covered = {d.path for d in docs}
    missing = [
        leaf
        for leaf in leaves(values)
        if not any(leaf == c or leaf.startswith(c + ".") for c in covered)
    ]
    if missing:
        sys.exit("values.yaml: no `# --` comment documents " + ", ".join(missing))
    rows = ["| Key | Default | Description |", "|---|---|---|"]
    for d in docs:
        if d.default is not None:
            default = d.default
        else:
            value = lookup(values, d.path)
            default = "`" + json.dumps(value, separators=(", ", ": "), sort_keys=True) + "`"
        rows.append(f"| `{d.path}` | {cell(default)} | {cell(d.description)} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if README.md's table is stale")
    p.add_argument("--chart", type=Path, default=CHART, help="chart directory")
    args = p.parse_args()
    chart = args.chart.resolve()
    readme_path = chart / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    if BEGIN not in readme or END not in readme:
        sys.exit(f"{readme_path}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    values_text = (chart / "values.yaml").read_text(encoding="utf-8")
    fresh = head + BEGIN + "\n" + table(values_text) + END + tail
    if args.check:
        if fresh != readme:
            print(
                f"{readme_path}: the values table is stale; "
                "run .venv/bin/python scripts/chart-values-table.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if fresh != readme:
        readme_path.write_text(fresh, encoding="utf-8")
        print(f"wrote the values table of {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
