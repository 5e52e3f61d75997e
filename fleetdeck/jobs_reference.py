"""The reference section of docs/jobs.md, generated from the job catalog and the agent's handlers.

    python -m fleetdeck.jobs_reference          # rewrite the section in docs/jobs.md
    python -m fleetdeck.jobs_reference --check  # exit 1 when the section differs from the catalog

Per domain, a table of its kinds (usage line, group, plan, whether this agent handles it), then the
fields of each declared result (name, type, description) as `GET /v1/job-kinds` publishes them in
`result_schema`. The section lies between two marker comments; the hand-written prose around it
is left as it is. It lives here, in the composition root, because it reads both the catalog
(`contract`) and the agent's handler table (`agent`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.jobs.kinds import all_kinds
from contract.job_kinds import CATALOG, JobKind

BEGIN = "<!-- BEGIN generated reference: python -m fleetdeck.jobs_reference (do not edit by hand) -->"
END = "<!-- END generated reference -->"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "jobs.md"
REGENERATE = "python -m fleetdeck.jobs_reference"


def reference() -> str:
    """The generated section, markers included."""
    handled = set(all_kinds())
    domains: dict[str, list[JobKind]] = {}
    for entry in CATALOG.values():
        domains.setdefault(entry.domain, []).append(entry)
    lines = [BEGIN, "", "## Reference: every kind, from the catalog", ""]
    lines += [
        "Generated from the catalog (`contract.job_kinds`) and the agent's handlers: each kind's",
        "usage, capability group, minimum plan, whether this agent runs it, the destructive ones (a",
        "client asks for their `confirm` argument to be typed again), and the fields of the result",
        "it prints with `--json` (`result_schema` in `GET /v1/job-kinds`).",
    ]
    for domain in sorted(domains):
        lines += ["", f"### `{domain}` kinds", "", "| kind | usage | group | plan | agent |", "|---|---|---|---|---|"]
        kinds = sorted(domains[domain], key=lambda entry: entry.kind)
        for entry in kinds:
            agent = "handled" if entry.kind in handled else "no handler yet"
            usage = _cell(entry.usage().removeprefix("usage: "))
            lines.append(f"| `{entry.kind}` | `{usage}` | {entry.group} | {entry.min_plan} | {agent} |")
        destructive = [f"`{entry.kind}` (its `{entry.confirm}`)" for entry in kinds if entry.confirm]
        if destructive:
            lines += ["", f"Destructive, run once the value is typed again (`confirm`): {', '.join(destructive)}."]
        for entry in kinds:
            lines += _result_lines(entry)
    lines += ["", END]
    return "\n".join(lines)


def _result_lines(entry: JobKind) -> list[str]:
    schema = entry.result_schema()
    if schema is None:
        return []
    defs: dict[str, Any] = schema.get("$defs", {})
    lines = ["", f"`{entry.kind}` prints {_type(schema, defs)}:", "", "| field | type | description |", "|---|---|---|"]
    for name, node in _fields(schema, defs, ""):
        lines.append(f"| `{name}` | {_cell(_type(node, defs))} | {_cell(node.get('description', ''))} |")
    return lines


def _fields(node: dict[str, Any], defs: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each field of the object (or list of objects) `node` at `path` (`pools[].pid`), then the
    fields of the models it holds."""
    model = _model(node, defs)
    if model is None:
        return
    where = f"{path}[]." if _resolve(node, defs).get("type") == "array" else f"{path}." if path else ""
    for name, prop in model["properties"].items():
        yield f"{where}{name}", prop
        yield from _fields(prop, defs, f"{where}{name}")


def _model(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """The object model `node` is, holds a list of, or may be (`X | None`); None for a plain value."""
    node = _resolve(node, defs)
    if "properties" in node:
        return node
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return _model(node["items"], defs)
    for alternative in node.get("anyOf", []):
        found = _model(alternative, defs)
        if found is not None:
            return found
    return None


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else node


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short type for a person: `string`, `integer | null`, `list of SiteRow`, `"on" | "off"`."""
    if "$ref" in node:
        return str(_resolve(node, defs).get("title", "object"))
    if "anyOf" in node:
        return " | ".join(_type(alternative, defs) for alternative in node["anyOf"])
    if "enum" in node:
        return " | ".join(f'"{value}"' for value in node["enum"])
    if "const" in node:
        return f'"{node["const"]}"'
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node.get('items', {}), defs)}"
    if kind == "object":
        return str(node.get("title", "object")) if "properties" in node else "object"
    return str(kind)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def with_reference(document: str, section: str) -> str:
    """`document` with its generated section replaced by `section` (added at the end when absent).

    Raises:
        ValueError: only one of the two markers is in `document`.
    """
    start, end = document.find(BEGIN), document.find(END)
    if start == -1 and end == -1:
        return document.rstrip("\n") + "\n\n" + section + "\n"
    if start == -1 or end == -1 or end < start:
        raise ValueError(f"docs/jobs.md has one generated-reference marker without the other: run {REGENERATE}")
    return document[:start] + section + document[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetdeck.jobs_reference", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/jobs.md's section is out of date")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the file holding the section (default: docs/jobs.md)")
    args = parser.parse_args(argv)
    document = args.docs.read_text(encoding="utf-8")
    wanted = with_reference(document, reference())
    if args.check:
        if wanted != document:
            print(f"{args.docs}: the generated reference differs from the catalog: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if wanted != document:
        args.docs.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
