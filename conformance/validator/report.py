"""The reports of a validation (issue 19, item 7): terminal, JSON (with its schema), JUnit XML and HTML.

All four read a :class:`~conformance.validator.result.ValidationResult` alone:

- :func:`render_text`: one line per group (clause, title, runtimes, count, the profiler's site, the first
  message), findings before notes, then the lines of what could not be judged, the runs table and a
  summary line; ``verbose`` adds each group's documentation sentence, fix and kept occurrences.
- :func:`to_json` is the result itself; :func:`json_schema` its JSON Schema (``profharness schema
  validate``).
- :func:`to_junit`: one ``<testsuite>`` per runtime (time: that runtime's runs), one test case per clause of
  its status: failed has a ``<failure>`` listing the groups, skipped a ``<skipped>`` with the reason (a rule
  a run never reached passes nothing), noted passes with the notes in ``<system-out>``.
- :func:`to_html`: the conformance report's look (:data:`conformance.core.report_style.STYLE`): a summary
  per runtime, the runs (each trace once), the groups (findings, then notes) with the documentation
  sentence, the fix, the site and the occurrences in a ``<details>``, and the clause x runtime table.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from typing import Any

from clr_model.clauses import CATALOG
from conformance.core.report_style import STYLE
from conformance.validator import perturb
from conformance.validator.result import (
    ClauseStatus,
    Group,
    Occurrence,
    RuleStatus,
    RunSummary,
    ValidationResult,
    WalkQuality,
)

__all__ = [
    "json_schema",
    "render_text",
    "repeated",
    "runs_text",
    "runtimes_of",
    "summary_line",
    "to_html",
    "to_json",
    "to_junit",
]

#: the title column of the terminal's group lines
_TITLE_WIDTH = 40


def runtimes_of(result: ValidationResult) -> list[str]:
    """The runtimes of the validation in their order: those that ran, then those only a status names (the
    validation was interrupted before their run)."""
    return list(dict.fromkeys([*(r.runtime for r in result.runs), *(s.runtime for s in result.rules)]))


def _site(group: Group) -> str:
    return group.site.text() if group.site else "(site unknown)"


def _exit(run: RunSummary) -> str:
    if run.signal:
        return run.signal
    return "-" if run.exit_code is None else str(run.exit_code)


def _records(run: RunSummary) -> str:
    return str(run.records) if run.judged >= run.records else f"{run.judged} of {run.records}"


#: the runs table's columns for a run's summary counts (issue 21), shown when some run has them
COUNT_HEADERS = ("walks ok", "compacting GCs", "recompiled")


def count_cells(run: RunSummary) -> list[str]:
    """A run's summary counts as the runs tables show them: S_OK walks of all walks; compacting GCs (those
    with address reuse); recompilations (OSR transitions, or why the runtime has none)."""
    c = run.counts
    if c is None:
        return ["-"] * len(COUNT_HEADERS)
    gcs = "-" if c.compacting_gcs is None else f"{c.compacting_gcs} (reuse {c.reuse_gcs})"
    osr = "OSR n/a" if "osr" in c.not_applicable else f"OSR {c.osr}"
    jit = "-" if c.recompilations is None else f"{c.recompilations} ({osr})"
    return [f"{c.walks_ok}/{c.walks}", gcs, jit]


def _occurrence(o: Occurrence) -> list[str]:
    """runtime, scenario (and the run's seed when perturbed), thread, callback, records, message."""
    records = ",".join(str(r) for r in o.records[:8]) + ("..." if len(o.records) > 8 else "")
    return [
        o.runtime,
        o.scenario if o.seed is None else f"{o.scenario} seed {o.seed}",
        f"thread {o.thread}" if o.thread is not None else "thread -",
        o.callback or "(no callback)",
        f"records {records}" if records else "records -",
        o.message,
    ]


def _counts(rules: Sequence[RuleStatus]) -> Counter[ClauseStatus]:
    return Counter(r.status for r in rules)


def _counts_text(rules: Sequence[RuleStatus]) -> str:
    counts = _counts(rules)
    return ", ".join(f"{counts[s]} {s.value}" for s in ClauseStatus)


def summary_line(result: ValidationResult) -> str:
    """``N finding group(s) (M occurrences), K note(s) on R run(s); clauses: ... [; interrupted ...]``."""
    findings = result.findings
    notes = [g for g in result.groups if g.note]
    text = (
        f"{len(findings)} finding group(s) ({sum(g.count for g in findings)} occurrence(s)), "
        f"{len(notes)} note(s) on {len(result.runs)} run(s); clauses: {_counts_text(result.rules)}"
    )
    if result.interrupted:
        text += "; interrupted: only what is above was judged"
    return text


def repeated(result: ValidationResult) -> bool:
    """Whether the validation repeated its runs or perturbed them (``--repeat``, ``--perturb``): then each
    group says in how many runs it appeared (:func:`runs_text`)."""
    if any(r.seed is not None for r in result.runs):
        return True
    per = Counter((r.runtime, r.scenario) for r in result.runs)
    return any(n > 1 for n in per.values())


def runs_text(result: ValidationResult, group: Group) -> str:
    """In how many of the validation's runs ``group`` appeared, per runtime, perturbed and unperturbed
    apart: ``in 10/10 perturbed runs (seeds 7-16) and 2/10 unperturbed runs on 8.0.4; ...``."""
    parts = []
    for runtime in runtimes_of(result):
        mine = [i for i, r in enumerate(result.runs) if r.runtime == runtime]
        if not mine:
            continue
        perturbed = [i for i in mine if result.runs[i].seed is not None]
        plain = [i for i in mine if result.runs[i].seed is None]
        said = []
        if perturbed:
            hit = [i for i in perturbed if i in group.runs]
            seeds = perturb.seeds_text(s for i in hit if (s := result.runs[i].seed) is not None)
            said.append(f"{len(hit)}/{len(perturbed)} perturbed runs{f' (seeds {seeds})' if seeds else ''}")
        if plain:
            hit = [i for i in plain if i in group.runs]
            said.append(f"{len(hit)}/{len(plain)} {'unperturbed ' if perturbed else ''}runs")
        parts.append(f"in {' and '.join(said)} on {runtime}")
    return "; ".join(parts)


def _table(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """Rows as aligned columns (the last column is never padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            cell if i == len(row) - 1 else (cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
            for i, cell in enumerate(row)
        ]
        out.append("  ".join(cells).rstrip())
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def render_text(result: ValidationResult, *, verbose: bool = False) -> str:
    """What ``profharness validate`` prints (see the module's docstring)."""
    lines: list[str] = []
    if result.groups:
        rows = [["", "clause", "title", "runtimes", "count", "site: first message"]]
        rows += [
            [
                "note" if g.note else "FAIL",
                g.clause,
                _cut(g.title, _TITLE_WIDTH),
                ",".join(g.runtimes),
                str(g.count),
                f"{_site(g)}: {g.first.message}",
            ]
            for g in result.groups
        ]
        table = _table(rows, right=frozenset({4}))
        lines.append(table[0])
        for group, line in zip(result.groups, table[1:], strict=True):
            lines.append(line)
            if repeated(result):
                lines.append(f"    {runs_text(result, group)}")
            if verbose:
                lines.extend(_details(group))
    else:
        lines.append("no finding")
    lines.extend(f"note: {n}" for n in result.notes)
    if verbose:
        skipped = [s for s in result.rules if s.status is ClauseStatus.SKIPPED]
        lines.extend(f"skipped: {s.clause} on {s.runtime}: {s.reason}" for s in skipped)
    lines.append("")
    if result.runs:
        counted = any(r.counts is not None for r in result.runs)
        runs = [["runtime", "scenario", "outcome", "exit", "seconds", "records",
                 *(COUNT_HEADERS if counted else ())]]  # fmt: skip
        runs += [[r.runtime, r.scenario, r.outcome, _exit(r), f"{r.seconds:.1f}", _records(r),
                  *(count_cells(r) if counted else ())] for r in result.runs]  # fmt: skip
        if any(r.seed is not None for r in result.runs):  # perturbed: the seed and the delays applied
            runs[0].append("seed (delays)")
            for row, r in zip(runs[1:], result.runs, strict=True):
                row.append("-" if r.seed is None else f"{r.seed} ({sum(r.delays.values())})")
        lines.extend(_table(runs, right=frozenset({4, 5, 6})))
        for r in result.runs:
            if r.walk_quality is not None:
                lines.append("")
                lines.append(f"walk quality on {r.runtime} ({r.scenario}): the profiler's DoStackSnapshot "
                             "walks of threads parked in its signal handler against the replay of each one's "
                             "capture")  # fmt: skip
                lines.extend(walk_quality_text(r.walk_quality))
    else:
        lines.append("no run was judged")
    lines.append(summary_line(result))
    return "\n".join(lines)


def walk_quality_text(quality: WalkQuality) -> list[str]:
    """``--walk-quality``'s table of one run (failure: walks that did not deliver exactly the truth's managed
    frames; missing and extra: frames, against the replay's truth)."""
    rows = [["place", "walks", "failed", "complete", "failure", "got", "truth", "missing", "extra",
             "no truth"]]  # fmt: skip
    for q in quality.rows:
        share = f"{q.failure_share:.1%}" if q.failure_share is not None else "n/a"
        rows.append([q.place, str(q.walks), str(q.failed), str(q.complete), share, str(q.frames_got),
                     str(q.frames_truth), str(q.missing), str(q.extra), str(q.no_truth)])  # fmt: skip
    lines = _table(rows, right=frozenset(range(1, 10))) if quality.rows else ["no walk of a parked thread"]
    lines.append(f"captured {quality.captured}, dropped {quality.dropped} (no free slot), "
                 f"{quality.not_parked} walk(s) of threads not parked in a signal handler (not captured), "
                 f"{quality.replay_failed} replay(s) failed")  # fmt: skip
    lines.extend(f"note: {n}" for n in quality.notes)
    lines.extend(f"left out: {s}" for s in quality.skipped[:5])
    if len(quality.skipped) > 5:
        lines.append(f"left out: ... and {len(quality.skipped) - 5} more")
    return lines


def _explanation(group: Group) -> list[tuple[str, str]]:
    """What explains a group, in order, each only when the catalog has it: the documentation sentence
    (``documented``; its document is ``group.document``), why a harness rule holds, the fix."""
    parts = (("documented", group.quote), ("why", group.reason), ("fix", group.fix))
    return [(label, text) for label, text in parts if text]


def _details(group: Group) -> list[str]:
    """The ``--verbose`` lines of a group: its sentence, fix and kept occurrences, indented."""
    pad = "    "
    out = [
        f"{pad}{label}: " + (f"\u201c{text}\u201d ({group.document})" if label == "documented" else text)
        for label, text in _explanation(group)
    ]
    kept = list(group.occurrences)
    if group.last not in kept:
        kept.append(group.last)
    first = len(group.occurrences)
    shown = f"the first {first} of {group.count}" if group.count > first else "all"
    out.append(f"{pad}occurrences ({shown}{', and the last' if len(kept) > first else ''}):")
    out.extend(pad + "  " + line for line in _table([_occurrence(o) for o in kept]))
    return out


# --------------------------------------------------------------------------------------------------------
# JSON


def to_json(result: ValidationResult) -> str:
    """The result as JSON (it reads back with ``ValidationResult.model_validate_json``)."""
    return json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`to_json`'s document (``profharness schema validate``)."""
    schema = ValidationResult.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": "profharness validate result",
        "description": "What `profharness validate --json` writes: every run, finding group (findings and "
        "notes), clause status per runtime, and whether the validation was interrupted.",
    }


# --------------------------------------------------------------------------------------------------------
# JUnit XML


def _mine(result: ValidationResult, clause: str, runtime: str) -> list[Group]:
    return [g for g in result.groups if g.clause == clause and runtime in g.runtimes]


def _group_line(g: Group) -> str:
    return f"x{g.count} on {', '.join(g.runtimes)} at {_site(g)}: {g.first.message}"


def to_junit(result: ValidationResult) -> bytes:
    """JUnit XML (see the module's docstring); test cases are named ``CLAUSE[runtime]``."""
    total = Counter[str]()
    suites = ET.Element("testsuites", name="profharness validate")
    for runtime in runtimes_of(result):
        statuses = [s for s in result.rules if s.runtime == runtime]
        runs = [r for r in result.runs if r.runtime == runtime]
        counts = _counts(statuses)
        seconds = sum(r.seconds for r in runs)
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"profharness validate[{runtime}]",
            tests=str(len(statuses)),
            failures=str(counts[ClauseStatus.FAILED]),
            errors="0",
            skipped=str(counts[ClauseStatus.SKIPPED]),
            time=f"{seconds:.3f}",
        )
        total.update(tests=len(statuses), failures=counts[ClauseStatus.FAILED])
        for status in statuses:
            case = ET.SubElement(suite, "testcase", classname=f"profharness.validate.{runtime}",
                                 name=f"{status.clause}[{runtime}]")  # fmt: skip
            groups = _mine(result, status.clause, runtime)
            failing = [g for g in groups if not g.note]
            notes = [g for g in groups if g.note]
            if status.status is ClauseStatus.FAILED:
                title = failing[0].title if failing else status.clause
                count = sum(g.count for g in failing)
                over = ", ".join(dict.fromkeys(r for g in failing for r in g.runtimes))
                failure = ET.SubElement(
                    case,
                    "failure",
                    message=f"{status.clause} ({title}): {count} occurrence(s) on {over} at {len(failing)} "
                    "site(s)",
                    type=status.clause,
                )
                failure.text = "\n".join(_group_line(g) for g in failing)
            elif status.status is ClauseStatus.SKIPPED:
                ET.SubElement(case, "skipped", message=status.reason or "the runs never exercised this rule")
            if notes:
                ET.SubElement(case, "system-out").text = "\n".join(f"note: {_group_line(g)}" for g in notes)
        out = [f"{r.scenario}: {r.outcome} (exit {_exit(r)}), {r.seconds:.3f}s, {_records(r)} records; "
               f"trace {r.trace}" for r in runs] or ["no run on this runtime was judged"]  # fmt: skip
        if result.interrupted:
            out.append("the validation was interrupted: only what is here was judged")
        out.extend(f"note: {n}" for n in result.notes)
        ET.SubElement(suite, "system-out").text = "\n".join(out)
    suites.set("tests", str(total["tests"]))
    suites.set("failures", str(total["failures"]))
    suites.set("time", f"{sum(r.seconds for r in result.runs):.3f}")
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


# --------------------------------------------------------------------------------------------------------
# HTML

_EXTRA_STYLE = """
.verdict{font-weight:bold} .verdict.ok{color:#070} .verdict.bad{color:#b00}
.banner{background:#fec;border:1px solid #c90;padding:6px 10px}
.ev.note{border-style:dashed} .ev h3{font-size:15px;margin:4px 0}
.ev blockquote{margin:6px 0 6px 12px;padding-left:8px;border-left:3px solid #99a;font-style:italic}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;background:#fdd}
.tag.note{background:#fec} code{background:#f6f6fa;padding:0 3px}
details{margin-top:6px} summary{cursor:pointer}
table.occ{border-collapse:collapse;margin-top:4px} .occ td,.occ th{border:1px solid #dde;padding:2px 6px;
vertical-align:top;font-size:13px} .occ th{background:#f2f2f8}
"""

_STATUS_CLASS = {
    ClauseStatus.FAILED: "div",
    ClauseStatus.NOTED: "exp",
    ClauseStatus.PASSED: "ok",
    ClauseStatus.SKIPPED: "na",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _group_html(index: int, g: Group, result: ValidationResult | None = None) -> str:
    kind = "note" if g.note else "finding"
    parts = [
        f"<div class='ev {kind}' id='group-{index}'>",
        f"<h3><span class='tag {kind}'>{kind}</span> {_e(g.clause)} {_e(g.title)} "
        f"<span class='small'>&times;{g.count} on {_e(', '.join(g.runtimes))}</span></h3>",
    ]
    for label, text in _explanation(g):
        if label == "documented":
            parts.append(f"<blockquote>{_e(text)}</blockquote><p class='small'>{_e(g.document)}</p>")
        else:
            parts.append(f"<p><b>{label}</b> {_e(text)}</p>")
    parts.append(f"<p><b>where</b> <code>{_e(_site(g))}</code></p>")
    if result is not None and repeated(result):
        parts.append(f"<p><b>runs</b> {_e(runs_text(result, g))}</p>")
    parts.append(f"<p><b>first</b> {_e(g.first.message)}</p>")
    if g.last != g.first:
        parts.append(f"<p><b>last</b> {_e(g.last.message)}</p>")
    kept = len(g.occurrences)
    summary = f"{g.count} occurrence(s)" + (f", the first {kept} kept" if g.count > kept else "")
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _occurrence(o)) + "</tr>" for o in g.occurrences
    )
    parts.append(
        f"<details><summary>{_e(summary)}</summary><table class='occ'><tr><th>runtime</th><th>scenario</th>"
        f"<th>thread</th><th>callback</th><th>records</th><th>message</th></tr>{rows}</table></details>"
    )
    parts.append("</div>")
    return "".join(parts)


def to_html(result: ValidationResult) -> str:
    """The HTML report (see the module's docstring)."""
    runtimes = runtimes_of(result)
    findings = result.findings
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>profharness validate: {_e(result.profiler.rsplit('/', 1)[-1])}</title>",
        f"<style>{STYLE}{_EXTRA_STYLE}</style></head><body>",
        "<h1>profharness validate report</h1>",
        f"<p class='small'>profiler {_e(result.profiler)} &middot; CLSID {_e(result.clsid)}</p>",
    ]
    if result.interrupted:
        out.append("<p class='banner'>The validation was interrupted: this report holds what was judged "
                   "before it stopped.</p>")  # fmt: skip
    verdict = "bad" if findings else "ok"
    out.append(f"<p class='verdict {verdict}'>{_e(summary_line(result))}</p>")

    out.append("<h2>Runtimes</h2><table class='matrix runtimes'><tr><th>runtime</th><th>runs</th>"
               "<th>outcome</th><th>exit code</th><th>failed</th><th>noted</th><th>passed</th>"
               "<th>skipped</th></tr>")  # fmt: skip
    for runtime in runtimes:
        runs = [r for r in result.runs if r.runtime == runtime]
        counts = _counts([s for s in result.rules if s.runtime == runtime])
        outcomes = ", ".join(dict.fromkeys(r.outcome for r in runs)) or "not run"
        exits = ", ".join(dict.fromkeys(_exit(r) for r in runs)) or "-"
        cells = "".join(
            f"<td class='{_STATUS_CLASS[s] if counts[s] else ''}'>{counts[s]}</td>" for s in ClauseStatus
        )
        out.append(f"<tr><td>{_e(runtime)}</td><td>{len(runs)}</td><td>{_e(outcomes)}</td>"
                   f"<td>{_e(exits)}</td>{cells}</tr>")  # fmt: skip
    out.append("</table>")

    out.append("<h2>Runs</h2>")
    if result.runs:
        out.append("<table class='matrix runs'><tr><th>runtime</th><th>scenario</th><th>outcome</th>"
                   "<th>exit code</th><th>seconds</th><th>records</th>"
                   + "".join(f"<th>{h}</th>" for h in COUNT_HEADERS) + "<th>trace</th></tr>")  # fmt: skip
        for r in result.runs:
            cls = "ok" if r.outcome in ("ok", "exited") else "div"
            out.append(
                f"<tr><td>{_e(r.runtime)}</td><td>{_e(r.scenario)}</td><td class='{cls}'>{_e(r.outcome)}</td>"
                f"<td>{_e(_exit(r))}</td><td>{r.seconds:.1f}</td><td>{_e(_records(r))}</td>"
                + "".join(f"<td>{_e(cell)}</td>" for cell in count_cells(r))
                + f"<td class='small'>{_e(r.trace)}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>No run was judged.</p>")

    out.append("<h2>Findings</h2>")
    out += [_group_html(i, g, result) for i, g in enumerate(result.groups) if not g.note] or [
        "<p>None: the profiler kept every rule the runs exercised.</p>"
    ]
    notes = [(i, g) for i, g in enumerate(result.groups) if g.note]
    if notes or result.notes:
        out.append("<h2>Notes</h2><p class='small'>Shown, never a failure: a rule the documents do not "
                   "state, or what could not be judged.</p>")  # fmt: skip
        out += [_group_html(i, g, result) for i, g in notes]
        if result.notes:
            out.append("<ul class='notes'>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")

    out.append("<h2>Clauses</h2>")
    if result.rules:
        out.append("<table class='matrix clauses'><tr><th>clause</th><th>what</th>"
                   + "".join(f"<th>{_e(r)}</th>" for r in runtimes) + "</tr>")  # fmt: skip
        table: dict[str, dict[str, RuleStatus]] = {}
        for status in result.rules:
            table.setdefault(status.clause, {})[status.runtime] = status
        for clause, per in table.items():
            row: list[str] = []
            for runtime in runtimes:
                here = per.get(runtime)
                if here is None:
                    row.append("<td>-</td>")
                    continue
                tip = f" title='{_e(here.reason)}'" if here.reason else ""
                row.append(f"<td class='{_STATUS_CLASS[here.status]}'{tip}>{_e(here.status.value)}</td>")
            known = CATALOG.get(clause)
            title = known.title if known else "(not in the catalog)"
            out.append(f"<tr><td>{_e(clause)}</td><td>{_e(title)}</td>{''.join(row)}</tr>")
        out.append("</table><p class='small'>hover a skipped cell for why the runs never exercised it.</p>")
    else:
        out.append("<p>No clause was judged.</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
