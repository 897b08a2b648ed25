"""Reports of a conformance run: terminal matrix (rich), JSON, JUnit XML and HTML.

The files are written atomically (:mod:`conformance.core.fsio`): a failed write leaves the old report.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from clr_model.clauses import CATALOG
from conformance.core.errors import InputError
from conformance.core.fsio import atomic_write_bytes, atomic_write_text
from conformance.core.report_style import STYLE
from conformance.suite.verdicts import Status, SuiteResult, Verdict, VerdictOutcome

_CELL = {
    Status.CONFORMS: "ok",
    Status.DIVERGES: "DIVERGES",
    Status.NOT_APPLICABLE: "n/a",
    Status.ERROR: "ERROR",
}


def _columns(result: SuiteResult) -> list[str]:
    """The matrix columns: the runtimes, then the emu layer's (older results have no columns)."""
    return result.columns or result.runtimes


def _cell(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    text = _CELL[verdict.status]
    if verdict.outcome is VerdictOutcome.EXPECTED_DIVERGENCE:
        text = "diverges*"
    elif (
        verdict.status is Status.NOT_APPLICABLE
        and verdict.outcome is VerdictOutcome.AS_DOCUMENTED
        and verdict.expectation is not None
    ):
        text = "n/a*"  # not applicable, as an expectation entry says
    elif verdict.outcome in (VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION):
        text += " !"
    return text


def _weight(verdict: Verdict) -> int:
    """How much a verdict says: a matrix cell shows the weightiest of its clause's verdicts on a runtime."""
    if verdict.outcome in (VerdictOutcome.ERROR, VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION):
        return 4
    return {Status.ERROR: 4, Status.DIVERGES: 3, Status.CONFORMS: 2, Status.NOT_APPLICABLE: 1}[verdict.status]


def _by_clause(result: SuiteResult) -> dict[str, dict[str, Verdict]]:
    """clause -> runtime -> the verdict its matrix cell shows (a clause judged by several experiments
    on one runtime shows the weightiest; the evidence section lists them all)."""
    table: dict[str, dict[str, Verdict]] = defaultdict(dict)
    for verdict in result.verdicts:
        shown = table[verdict.clause].get(verdict.runtime)
        if shown is None or _weight(verdict) > _weight(shown):
            table[verdict.clause][verdict.runtime] = verdict
    return dict(sorted(table.items()))


#: rich style of each matrix cell (colours show only on a terminal)
_STYLE_OF = {
    "ok": "green",
    "diverges*": "yellow",
    "n/a": "dim",
    "n/a*": "dim",
    "-": "dim",
}

#: the clause title column of the matrix
_TITLE_WIDTH = 46

LEGEND = (
    "legend: ok = conforms, diverges* = known divergence (expectation file), n/a* = not applicable as an"
    " expectation says, ! = unexpected"
)


def _cell_text(verdict: Verdict | None) -> Text:
    text = _cell(verdict)
    style = "bold red" if text.endswith("!") or text == "ERROR" else _STYLE_OF.get(text, "")
    return Text(text, style=style)


def matrix_table(result: SuiteResult) -> Table:
    """The clause x runtime matrix as a rich table (no outer frame: each row starts with its clause)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("clause", no_wrap=True)
    table.add_column("what", no_wrap=True, overflow="ellipsis", max_width=_TITLE_WIDTH)
    for runtime in _columns(result):
        table.add_column(runtime, justify="right", no_wrap=True, min_width=11)
    for clause_id, per_runtime in _by_clause(result).items():
        known = CATALOG.get(clause_id)
        title = (known.title if known else "(not in catalog)")[:_TITLE_WIDTH]
        table.add_row(clause_id, title, *(_cell_text(per_runtime.get(r)) for r in _columns(result)))
    return table


def summary_line(result: SuiteResult) -> str:
    counts: dict[str, int] = defaultdict(int)
    for verdict in result.verdicts:
        counts[verdict.status.value] += 1
    return (
        f"{len(_by_clause(result))} clauses x {len(_columns(result))} columns in {result.seconds:.1f}s: "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f"; {len(result.failures)} unexpected"
        + ("; interrupted: only the runs judged before it" if result.interrupted else "")
    )


def matrix_renderable(result: SuiteResult) -> Group:
    """The matrix, its summary line and the legend (what ``profharness conformance`` prints)."""
    summary = Text(summary_line(result), style="bold red" if result.failures else "bold green")
    return Group(matrix_table(result), summary, Text(LEGEND, style="dim"))


def render_matrix(result: SuiteResult, width: int = 200) -> str:
    """The matrix as plain text (no colours): for tests and logs."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    console.print(matrix_renderable(result))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


# ----------------------------------------------------------------------------------------------------------
# JSON

#: the layout of the JSON report: 2 = every evidence record stored once, in ``evidence_records`` (key ->
#: record), each verdict naming its records in order (``evidence_refs``); 1 (no ``report_format``) had each
#: verdict's records inline (``evidence``), which repeated the large ones (MovedReferences2) in every verdict
#: of their run. :func:`read_json` reads both.
REPORT_FORMAT = 2


def evidence_key(record: dict[str, Any]) -> str:
    """The key of an evidence record in ``evidence_records``: the first 16 hex digits of the sha256 of the
    record's compact JSON (sorted keys), so a record that several verdicts show is stored once."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def json_document(result: SuiteResult) -> dict[str, Any]:
    """The JSON report as a document: the result, its verdicts' evidence records stored once
    (``evidence_records``) and named by each verdict (``evidence_refs``), and the summary fields ``ok``,
    ``clauses`` (judged ones) and ``clauses_with_live_verdict``."""
    data: dict[str, Any] = json.loads(result.model_dump_json())
    records: dict[str, dict[str, Any]] = {}
    for verdict in data["verdicts"]:
        refs = []
        for record in verdict.pop("evidence"):
            key = evidence_key(record)
            if records.setdefault(key, record) != record:  # 64 bits: never seen, but never silently wrong
                raise ValueError(f"two evidence records share the key {key}")
            refs.append(key)
        verdict["evidence_refs"] = refs
    data["report_format"] = REPORT_FORMAT
    data["evidence_records"] = records
    data["ok"] = result.ok
    judged = [v for v in result.verdicts if v.status is not Status.ERROR and v.experiment != "-"]
    data["clauses"] = sorted({v.clause for v in judged})
    data["clauses_with_live_verdict"] = sorted({v.clause for v in judged if v.runtime in result.runtimes})
    return data


def dumps_document(data: dict[str, Any]) -> str:
    """The report's text: indented JSON (sorted keys), except that each evidence record is on one line of
    its own (compact): records hold long arrays (a MovedReferences2 callback's ranges), one number a line
    would make them most of the file."""
    items = sorted(data.items())
    lines = ["{"]
    for i, (name, value) in enumerate(items):
        if name == "evidence_records" and value:
            body = ",\n".join(
                f"    {json.dumps(key)}: {json.dumps(record, sort_keys=True, separators=(',', ':'))}"
                for key, record in value.items()
            )
            text = "{\n" + body + "\n  }"
        else:  # a JSON text has no raw line break inside a string: indenting every line is safe
            text = json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  ")
        lines.append(f"  {json.dumps(name)}: {text}{',' if i < len(items) - 1 else ''}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_json(result: SuiteResult, path: Path) -> None:
    atomic_write_text(path, dumps_document(json_document(result)))


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`write_json`'s report, format 2 (``profharness schema conformance``). A
    schema cannot say that every ``evidence_refs`` key is in ``evidence_records``: :func:`read_json` checks
    that."""
    schema = SuiteResult.model_json_schema(mode="serialization")
    key = {"type": "string", "pattern": "^[0-9a-f]{16}$"}
    verdict = schema["$defs"]["Verdict"]
    del verdict["properties"]["evidence"]
    verdict["properties"]["evidence_refs"] = {
        "type": "array",
        "items": key,
        "description": "the verdict's evidence records, in order: keys of evidence_records",
    }
    verdict["required"] = [*verdict["required"], "evidence_refs"]
    verdict["additionalProperties"] = False
    strings = {"type": "array", "items": {"type": "string"}}
    schema["properties"].update(
        {
            "report_format": {"const": REPORT_FORMAT},
            "evidence_records": {
                "type": "object",
                "propertyNames": key,
                "additionalProperties": {"type": "object"},
                "description": "every evidence record once: the first 16 hex digits of the sha256 of the "
                "record's compact JSON (sorted keys) -> the trace record",
            },
            "ok": {"type": "boolean", "description": "nothing unexpected, and the whole suite ran"},
            "clauses": {**strings, "description": "the clauses judged (no error) by an experiment"},
            "clauses_with_live_verdict": {**strings, "description": "those of them judged on a live runtime"},
        }
    )
    schema["required"] = [
        *schema["required"], "report_format", "evidence_records", "ok", "clauses", "clauses_with_live_verdict"
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": "profharness conformance result",
        "description": "What `profharness conformance --json` writes: every verdict (clause x column), each "
        "naming its evidence records, stored once in evidence_records; the runs; whether the suite was ok.",
    }


def result_from_document(data: Any, where: str) -> SuiteResult:
    """The suite result a JSON report holds, each verdict's evidence records resolved from
    ``evidence_records`` (format 2) or read inline (format 1). ``where`` names the report in errors: a
    missing reference or a document that is no report is one :class:`InputError` line."""
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
        raise InputError(f"{where}: not a suite result (write one with `profharness conformance --json`)")
    layout = data.get("report_format", 1)
    if layout not in (1, REPORT_FORMAT):
        raise InputError(f"{where}: report_format {layout!r}: this profharness reads 1 and {REPORT_FORMAT}")
    records = data.get("evidence_records", {})
    if not isinstance(records, dict):
        raise InputError(f"{where}: evidence_records: not an object (key -> record)")
    verdicts = []
    for i, verdict in enumerate(data["verdicts"]):
        if not isinstance(verdict, dict):
            raise InputError(f"{where}: verdicts[{i}]: not an object")
        verdict = dict(verdict)
        what = (
            f"verdicts[{i}] ({verdict.get('clause')} on {verdict.get('runtime')},"
            f" experiment {verdict.get('experiment')})"
        )
        refs = verdict.pop("evidence_refs", None)
        if refs is not None:
            if not isinstance(refs, list):
                raise InputError(f"{where}: {what}: evidence_refs: not a list of keys")
            missing = next((r for r in refs if not isinstance(r, str) or r not in records), None)
            if missing is not None:
                raise InputError(
                    f"{where}: {what}: evidence reference {missing!r} is not in evidence_records"
                )
            verdict["evidence"] = [records[r] for r in refs]
        verdicts.append(verdict)
    try:
        return SuiteResult.model_validate({**data, "verdicts": verdicts})
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where}: {place}: {first['msg']}") from None


def read_json(path: Path) -> SuiteResult:
    """The suite result in a JSON report (:func:`write_json`'s, or a format 1 report)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from exc
    return result_from_document(data, str(path))


def write_junit(result: SuiteResult, path: Path) -> None:
    """JUnit XML: one testsuite per runtime, one testcase per clause (name ``DSS-05[8.0.4]``)."""
    suites = ET.Element("testsuites", name="profharness conformance", time=f"{result.seconds:.3f}")
    for runtime in _columns(result):
        mine = [v for v in result.verdicts if v.runtime == runtime]
        failures = [
            v for v in mine if v.outcome in (VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION)
        ]
        errors = [v for v in mine if v.outcome is VerdictOutcome.ERROR]
        skipped = [
            v for v in mine if v.status is Status.NOT_APPLICABLE and v.outcome is VerdictOutcome.AS_DOCUMENTED
        ]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"profharness[{runtime}]",
            tests=str(len(mine)),
            failures=str(len(failures)),
            errors=str(len(errors)),
            skipped=str(len(skipped)),
            time="0",
        )
        for verdict in mine:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"profharness.{runtime}.{verdict.experiment}",
                name=f"{verdict.clause}[{runtime}]",
                time="0",
            )
            if verdict in failures:
                failure = ET.SubElement(
                    case, "failure", message=verdict.outcome_message, type=verdict.status.value
                )
                failure.text = (
                    f"observed: {verdict.observed}\nexpected: {verdict.expected}\ntrace: {verdict.trace}"
                )
            elif verdict in errors:
                error = ET.SubElement(case, "error", message=verdict.outcome_message, type="error")
                error.text = f"{verdict.observed}\ntrace: {verdict.trace}"
            elif verdict in skipped:
                ET.SubElement(case, "skipped", message=verdict.observed)
            out = ET.SubElement(case, "system-out")
            out.text = (
                f"{verdict.status.value}: {verdict.observed}\ntrace: {verdict.trace} ({verdict.trace_sha256})"
            )
    ET.indent(suites)
    atomic_write_bytes(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True))


# ----------------------------------------------------------------------------------------------------------
# HTML

_STYLE = STYLE

#: frame pictures: advance of one character of 12px monospace (DejaVu/Liberation Mono: 7.2px) plus margin
_SVG_CHAR_PX = 7.5
#: longer frame labels are cut (with an ellipsis); the full label is the frame's tooltip
_SVG_MAX_CHARS = 120


def _css_class(verdict: Verdict | None) -> str:
    if verdict is None:
        return ""
    cls = {
        Status.CONFORMS: "ok",
        Status.DIVERGES: "div",
        Status.NOT_APPLICABLE: "na",
        Status.ERROR: "err",
    }[verdict.status]
    if verdict.outcome is VerdictOutcome.EXPECTED_DIVERGENCE:
        cls = "exp"
    if verdict.outcome in (VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION):
        cls += " bad"
    return cls


def frames_svg(picture: list[dict[str, Any]]) -> str:
    """A small picture of a stack walk: one box per frame, leaf on top; red where it disagrees.

    The picture is as wide as its longest label (labels over ``_SVG_MAX_CHARS`` characters are cut, the
    whole label stays in the frame's tooltip) and scales down in a narrower window.
    """
    if not picture:
        return ""
    labels = [f"{i}: {frame.get('label', '?')}" for i, frame in enumerate(picture)]
    shown = [t if len(t) <= _SVG_MAX_CHARS else t[: _SVG_MAX_CHARS - 1] + "\u2026" for t in labels]
    row = 22
    width = max(460, round(max(len(t) for t in shown) * _SVG_CHAR_PX) + 16)
    height = row * len(picture) + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img" aria-label="stack walk, leaf first">',
        '<text x="4" y="14" font-size="11" fill="#556">leaf (first callback)</text>',
    ]
    for i, (frame, full, text) in enumerate(zip(picture, labels, shown, strict=True)):
        y = 20 + i * row
        fill = "#dfd" if frame.get("ok", True) else "#fbb"
        parts.append(
            f"<g><title>{html.escape(full)}</title>"
            f'<rect x="2" y="{y}" width="{width - 4}" height="{row - 3}" fill="{fill}" stroke="#889"/>'
            f'<text x="8" y="{y + 14}" font-size="12" font-family="monospace">{html.escape(text)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _has_evidence(verdict: Verdict) -> bool:
    """Whether the report shows the verdict's evidence (divergences, errors, anything unexpected)."""
    return verdict.status in (Status.DIVERGES, Status.ERROR) or verdict.outcome in (
        VerdictOutcome.UNEXPECTED,
        VerdictOutcome.STALE_EXPECTATION,
    )


def _anchor(verdict: Verdict) -> str:
    return f"ev-{verdict.clause}-{verdict.runtime}-{verdict.experiment}"


_OUTCOME_WORDS = {
    VerdictOutcome.EXPECTED_DIVERGENCE: "known divergence",
    VerdictOutcome.UNEXPECTED: "unexpected",
    VerdictOutcome.STALE_EXPECTATION: "stale expectation",
}


def render_html(result: SuiteResult) -> str:
    table = _by_clause(result)
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>profharness conformance</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>profharness conformance report</h1>",
        f"<p class='small'>{len(table)} clauses on {len(_columns(result))} columns in {result.seconds:.1f}s; "
        f"{len(result.failures)} unexpected.</p>",
        "<p class='small'><b>Interrupted</b>: this report holds the verdicts of the runs judged before the "
        "suite was stopped.</p>"
        if result.interrupted
        else "",
        "<table class='matrix'><tr><th>clause</th><th>what</th>",
    ]
    out += [
        f"<th>{html.escape(r)}<br><span class='small'>{html.escape(result.runtime_sources.get(r, ''))}"
        "</span></th>"
        for r in _columns(result)
    ]
    out.append("</tr>")
    for clause_id, per_runtime in table.items():
        known = CATALOG.get(clause_id)
        title = html.escape(known.title if known else "(not in catalog)")
        first = next((v for v in per_runtime.values() if _has_evidence(v)), None)
        name = html.escape(clause_id)
        link = f"<a href='#{html.escape(_anchor(first))}'>{name}</a>" if first else name
        out.append(f"<tr><td>{link}</td><td>{title}</td>")
        for runtime in _columns(result):
            verdict = per_runtime.get(runtime)
            text = html.escape(_cell(verdict))
            if verdict is not None and _has_evidence(verdict):
                text = f"<a href='#{html.escape(_anchor(verdict))}'>{text}</a>"
            tip = html.escape(verdict.observed if verdict else "")
            out.append(f"<td class='{_css_class(verdict)}' title='{tip}'>{text}</td>")
        out.append("</tr>")
    out.append("</table>")
    out.append(
        "<p class='small'>ok = conforms, diverges* = known divergence (expectation file),"
        " ! = unexpected, n/a = not applicable, - = not run; hover a cell for what was observed.</p>"
    )
    out.append("<h2>Divergences, errors and their evidence</h2>")
    shown = 0
    for verdict in sorted(result.verdicts, key=lambda v: (v.clause, v.runtime, v.experiment)):
        clause_id, runtime = verdict.clause, verdict.runtime
        if not _has_evidence(verdict):
            continue
        shown += 1
        known = CATALOG.get(clause_id)
        how = _OUTCOME_WORDS.get(verdict.outcome) if verdict.outcome else None
        out.append(
            f"<div class='ev' id='{html.escape(_anchor(verdict))}'><h3>{html.escape(clause_id)} on "
            f"{html.escape(runtime)}: {html.escape(verdict.status.value)}"
            f"{f' ({how})' if how else ''} <span class='small'>experiment {html.escape(verdict.experiment)}"
            "</span></h3>"
        )
        if known:
            out.append(f"<p><i>{html.escape(known.paraphrase)}</i></p>")
        out.append(
            f"<p><b>observed</b> {html.escape(verdict.observed)}<br>"
            f"<b>model</b> {html.escape(verdict.expected)}</p>"
        )
        if verdict.disagreements:
            listed = set(verdict.expectation.disagreements) if verdict.expectation else set()
            items = "".join(
                f"<li>{html.escape(line)}{'' if line in listed else ' <b>(not in an expectation)</b>'}</li>"
                for line in verdict.disagreements
            )
            out.append(f"<p><b>disagreements</b></p><ul class='dis'>{items}</ul>")
        if verdict.expectation:
            source = html.escape(verdict.expectation.source)
            out.append(
                f"<p><b>expectation</b> <span class='small'>{source}</span>: "
                f"{html.escape(verdict.expectation.why)}</p>"
            )
        out.append(
            f"<p class='small'>{html.escape(verdict.outcome_message)}<br>trace "
            f"{html.escape(str(verdict.trace))} sha256 {html.escape(str(verdict.trace_sha256))}</p>"
        )
        out.append(frames_svg(verdict.picture))
        if verdict.evidence:
            excerpt = "\n".join(json.dumps(r, sort_keys=True) for r in verdict.evidence)
            out.append(f"<pre>{html.escape(excerpt)}</pre>")
        out.append("</div>")
    if not table:
        out.append("<p>None: no clause was judged (no experiment ran on these runtimes).</p>")
    elif not shown:
        out.append("<p>None: every judged clause conforms on every runtime.</p>")
    out.append("</body></html>")
    return "\n".join(out)


def write_html(result: SuiteResult, path: Path) -> None:
    atomic_write_text(path, render_html(result))
