"""Expectation files: what each runtime is known to do where it departs from the contract documents.

Every ``*.toml`` file of ``conformance/expectations/`` is read; each table is one entry for one clause::

    [DSS-02]
    runtimes = ["3.1.23", "8.0"]            # columns: versions, or version prefixes ("8.0" covers 8.0.4)
    status = "diverges"                     # or "not-applicable", or a list of what a run may give
    disagreements = [                       # every disagreement line the verdict gives, exactly
        "cross-thread walk: DoStackSnapshot returned E_NOTIMPL, expected S_OK",
    ]
    why = "One sentence: why the runtime differs from the document."

In the manner of the web platform tests' per-subtest metadata, an entry pins *every* disagreement of its
clause: a verdict with a line the entry does not list is unexpected (naming the line), and a listed line
that no longer occurs is stale (naming it). A judge declares that its clause applies to its experiment, so
a not-applicable verdict is unexpected unless an entry lists ``not-applicable`` with a reason; a listed
divergence that comes back not-applicable fails too. ``status`` as a list (``["diverges",
"not-applicable"]``) documents a clause whose run cannot always exercise it; ``why`` says why.

An item of ``runtimes`` names matrix columns: a version or prefix names the live column of those runtimes;
the same after a layer's name names that layer's column (``"emu 8.0.4"``, ``"emu 8.0"``: the emulator's
replay of the runtime's samples); a layer's name and words that are no version name that one column
(``"emu x86 hooks"``). A version alone never covers a layer's column.

An entry may cover several runtimes, so identical divergences are written once; two entries for the same
clause and runtime (in any files) are an error naming both. ``profharness expectations update --from
RUN.json`` proposes the edit that makes the files describe a run; a new entry's ``why`` is the placeholder
:data:`WHY_PLACEHOLDER`, which this loader refuses until a human writes the reason.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conformance.core.errors import InputError
from conformance.core.fsio import read_text_file
from conformance.core.paths import EXPECTATIONS_DIR
from conformance.suite.verdicts import AppliedExpectation, Status, Verdict, VerdictOutcome

#: the ``why`` of an entry proposed by ``expectations update``: refused by the loader until replaced
WHY_PLACEHOLDER = "WRITE-ME"

_VERSION = re.compile(r"^\d+(\.\d+)*$")
_HEADER = re.compile(r"^\[([A-Za-z0-9]+-\d+)\]\s*(#.*)?$")


#: the layers besides the live one whose columns an entry may name (``"<layer> <version>"`` and the like)
COLUMN_LAYERS: tuple[str, ...] = ("emu",)
#: a layer's column that is not per runtime: lower-case words after the layer's name ("emu x86 hooks")
_NAMED_COLUMN = re.compile(r"^[a-z0-9]+( [a-z0-9]+)*$")


def runtime_matches(version: str, pattern: str) -> bool:
    """Whether a runtime version is covered by an entry's ``runtimes`` item (a version or a prefix); a
    layer's column likewise ("emu 8.0" covers "emu 8.0.4", "8.0" does not)."""
    return version == pattern or version.startswith(pattern + ".")


def _layer_and_rest(column: str) -> tuple[str, str]:
    """("", version) for a live column or item, (layer, rest) for a layer's ("emu 8.0.4", "emu x86 hooks")."""
    layer, _, rest = column.partition(" ")
    return (layer, rest) if rest and layer in COLUMN_LAYERS else ("", column)


def _overlap(a: str, b: str) -> bool:
    return runtime_matches(a, b) or runtime_matches(b, a)


class _EntryFields(BaseModel):
    """The keys of one table, validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtimes: tuple[str, ...] = Field(min_length=1)
    status: tuple[Status, ...] = Field(min_length=1)
    disagreements: tuple[str, ...] = ()
    why: str = Field(min_length=10)

    @field_validator("status", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("runtimes")
    @classmethod
    def _versions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            layer, rest = _layer_and_rest(item)
            if not (_VERSION.match(rest) or (layer and _NAMED_COLUMN.match(rest))):
                raise ValueError(
                    f"{item!r} is not a version or version prefix (like 8.0.4 or 8.0), nor a column of a "
                    f"layer ({', '.join(COLUMN_LAYERS)}) like 'emu 8.0.4' or 'emu x86 hooks'"
                )
        return value

    @field_validator("why")
    @classmethod
    def _written(cls, value: str) -> str:
        if value.strip().startswith(WHY_PLACEHOLDER):
            raise ValueError(f"still the {WHY_PLACEHOLDER} placeholder: write why the runtime differs")
        return value


@dataclass(frozen=True)
class Expectation:
    """One entry: what the runtimes it covers do for one clause, and why."""

    clause: str
    runtimes: tuple[str, ...]
    status: tuple[Status, ...]
    why: str
    disagreements: tuple[str, ...] = ()
    file: Path = field(default=Path("?"))
    line: int = 0

    @property
    def source(self) -> str:
        return f"{self.file.name}:{self.line}"

    def covers(self, column: str) -> bool:
        """Whether the entry covers a matrix column: a runtime version, or a layer's column."""
        return any(runtime_matches(column, p) for p in self.runtimes)

    def applied(self) -> AppliedExpectation:
        return AppliedExpectation(
            status=self.status, why=self.why, disagreements=self.disagreements, source=self.source
        )


@dataclass(frozen=True)
class ExpectationSet:
    """Every entry of an expectation folder."""

    entries: tuple[Expectation, ...]
    directory: Path

    def for_runtime(self, column: str) -> dict[str, Expectation]:
        """clause -> the entry covering ``column``, a runtime version or a layer's column such as
        "emu 8.0.4" (the loader guarantees at most one)."""
        return {e.clause: e for e in self.entries if e.covers(column)}

    def of_clause(self, clause: str) -> list[Expectation]:
        return [e for e in self.entries if e.clause == clause]


def _header_lines(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _HEADER.match(line.strip())
        if match:
            found.setdefault(match.group(1), number)
    return found


def _validate(path: Path, clause: str, table: Mapping[str, Any], line: int) -> Expectation:
    where = f"{path}:{line}: [{clause}]"
    if "observed" in table:
        raise InputError(
            f"{where}: 'observed' is the old form; list every disagreement line in 'disagreements'"
        )
    try:
        fields = _EntryFields.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where} {key}: {first['msg']}") from exc
    if Status.ERROR in fields.status:
        raise InputError(f"{where} status: an error is never expected (fix the run or the judge)")
    if set(fields.status) == {Status.CONFORMS}:
        raise InputError(f"{where} status: an entry that only says 'conforms' says nothing; remove it")
    if Status.DIVERGES in fields.status and not fields.disagreements:
        raise InputError(f"{where} disagreements: a divergence must list every disagreement line")
    if Status.DIVERGES not in fields.status and fields.disagreements:
        raise InputError(f"{where} disagreements: only a 'diverges' entry lists disagreements")
    return Expectation(
        clause=clause,
        runtimes=fields.runtimes,
        status=fields.status,
        why=fields.why,
        disagreements=fields.disagreements,
        file=path,
        line=line,
    )


def _key_line(text: str, key: str) -> int:
    """The first line that assigns ``key`` (bare or quoted), else 1."""
    pattern = re.compile(rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*[=.]""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 1


def _toml_error_line(message: str, text: str) -> int:
    """The line tomllib's message names ("(at line 3, column 7)"), or the last line ("at end of document")."""
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else text.count("\n") + 1


def load_file(path: Path) -> list[Expectation]:
    """The entries of one expectation file (each a table named by its clause id)."""
    text = read_text_file(path, "expectation file")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}:{_toml_error_line(str(exc), text)}: not valid TOML: {exc}") from None
    lines = _header_lines(text)
    entries = []
    for clause, table in raw.items():
        if not isinstance(table, dict):
            line = lines.get(clause) or _key_line(text, clause)
            raise InputError(f"{path}:{line}: [{clause}] must be a table (one entry per clause and file)")
        entries.append(_validate(path, clause, table, lines.get(clause) or _key_line(text, clause)))
    return entries


def load_expectations(directory: Path | None = None) -> ExpectationSet:
    """Every entry of every ``*.toml`` file of the folder; a clause given twice for a runtime is an error."""
    folder = directory or EXPECTATIONS_DIR
    entries: list[Expectation] = []
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        for entry in load_file(path):
            for other in entries:
                if other.clause != entry.clause:
                    continue
                clash = [(a, b) for a in entry.runtimes for b in other.runtimes if _overlap(a, b)]
                if clash:
                    a, b = clash[0]
                    shown = a if a == b else f"{a} / {b}"
                    raise InputError(
                        f"[{entry.clause}] runtime {shown} has two expectation entries: {other.file}:"
                        f"{other.line} and {entry.file}:{entry.line}"
                    )
            entries.append(entry)
    return ExpectationSet(entries=tuple(entries), directory=folder)


# ----------------------------------------------------------------------------------------------------------
# measuring a verdict


def _lines(lines: Iterable[str]) -> str:
    return " | ".join(lines)


def _not_exercised(label: str, why: str, verdict: Verdict) -> tuple[VerdictOutcome, str]:
    """A not-applicable verdict no expectation entry allows: the clause was declared to apply."""
    return VerdictOutcome.UNEXPECTED, f"{label}: not applicable, but {why}: {verdict.observed}"


def classify(verdict: Verdict, expectation: Expectation | None) -> tuple[VerdictOutcome, str]:
    """Measure a verdict against the entry covering its clause and runtime; the message names both."""
    label = f"{verdict.clause}[{verdict.runtime}]"
    if verdict.status is Status.ERROR:
        return VerdictOutcome.ERROR, f"{label}: error: {verdict.observed}"
    lines = list(dict.fromkeys(verdict.disagreements))
    if expectation is None:
        if verdict.status is Status.DIVERGES:
            return (
                VerdictOutcome.UNEXPECTED,
                f"{label}: diverges and no expectation explains it: {len(lines)} disagreement(s):"
                f" {_lines(lines)}; model expects {verdict.expected}",
            )
        if verdict.status is Status.NOT_APPLICABLE:
            why = (
                f"experiment {verdict.experiment} declares the clause applies and no expectation entry says "
                "not-applicable"
            )
            return _not_exercised(label, why, verdict)
        return VerdictOutcome.AS_DOCUMENTED, f"{label}: {verdict.status}"
    entry = f"the expectation entry {expectation.source}"
    expected_status = "/".join(s.value for s in expectation.status)
    if verdict.status not in expectation.status:
        if verdict.status is Status.NOT_APPLICABLE:
            why = f"{entry} expects {expected_status}: a listed divergence must be exercised"
            return _not_exercised(label, why, verdict)
        if verdict.status is Status.CONFORMS:
            return (
                VerdictOutcome.STALE_EXPECTATION,
                f"{label}: {entry} expects {expected_status}, which no longer occurs (now conforms:"
                f" {verdict.observed})",
            )
        return (
            VerdictOutcome.UNEXPECTED,
            f"{label}: diverges, but {entry} expects {expected_status}: {_lines(lines)}",
        )
    if verdict.status is Status.DIVERGES:
        listed = set(expectation.disagreements)
        new = [line for line in lines if line not in listed]
        gone = [line for line in expectation.disagreements if line not in set(lines)]
        if new:
            also = f" (and {len(gone)} listed line(s) no longer occur)" if gone else ""
            return (
                VerdictOutcome.UNEXPECTED,
                f"{label}: new disagreement(s) not listed in {entry}: {_lines(new)}{also}",
            )
        if gone:
            return (
                VerdictOutcome.STALE_EXPECTATION,
                f"{label}: listed disagreement(s) of {entry} no longer occur: {_lines(gone)}",
            )
        return VerdictOutcome.EXPECTED_DIVERGENCE, f"{label}: known divergence: {expectation.why}"
    if verdict.status is Status.NOT_APPLICABLE:
        return (
            VerdictOutcome.AS_DOCUMENTED,
            f"{label}: not applicable, as {entry} says ({expectation.why}): {verdict.observed}",
        )
    return VerdictOutcome.AS_DOCUMENTED, f"{label}: conforms (one of {expected_status}, per {entry})"


# ----------------------------------------------------------------------------------------------------------
# proposing the edit that makes the files describe a run (`profharness expectations update`)


@dataclass(frozen=True)
class Observed:
    """What a run showed for one clause on one runtime (every experiment's verdicts combined)."""

    clause: str
    runtime: str
    status: Status
    disagreements: tuple[str, ...]


@dataclass
class Proposal:
    """The new text of each file to change, and notes on what could not be proposed."""

    directory: Path
    old: dict[Path, str] = field(default_factory=dict)
    new: dict[Path, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def diff(self) -> str:
        chunks: list[str] = []
        for path in sorted(self.new):
            old, new = self.old.get(path, ""), self.new[path]
            if old == new:
                continue
            name = _display(path, self.directory)
            chunks.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"a/{name}" if path in self.old else "/dev/null",
                    tofile=f"b/{name}",
                )
            )
        return "".join(chunks)

    @property
    def changed(self) -> list[Path]:
        return sorted(p for p, text in self.new.items() if self.old.get(p, "") != text)


def _display(path: Path, directory: Path) -> Path:
    """A path as a diff shows it: relative to the working folder, else to the expectation folder's parent."""
    for base in (Path.cwd(), directory.parent):
        if path.resolve().is_relative_to(base.resolve()):
            return path.resolve().relative_to(base.resolve())
    return path


def observations(run: Mapping[str, Any]) -> tuple[list[Observed], list[str]]:
    """Read a suite result (``profharness conformance --json``): one observation per clause and runtime."""
    verdicts = run.get("verdicts")
    if not isinstance(verdicts, list):
        raise InputError(
            "the run file has no 'verdicts' list (write it with `profharness conformance --json`)"
        )
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in verdicts:
        if not isinstance(item, dict) or item.get("experiment") == "-":
            continue  # "-": an entry no experiment checks, not an observation
        grouped.setdefault((str(item["clause"]), str(item["runtime"])), []).append(item)
    found: list[Observed] = []
    notes: list[str] = []
    for (clause, runtime), items in sorted(grouped.items()):
        statuses = {Status(str(i["status"])) for i in items}
        if Status.ERROR in statuses:
            notes.append(f"{clause}[{runtime}]: error in the run; nothing proposed (fix the run first)")
            continue
        lines: dict[str, None] = {}
        for item in items:
            if item["status"] == Status.DIVERGES:
                given = item.get("disagreements") or [item["observed"]]
                lines.update((str(line), None) for line in given)
        if Status.DIVERGES in statuses:
            status = Status.DIVERGES
        elif Status.NOT_APPLICABLE in statuses:
            status = Status.NOT_APPLICABLE
        else:
            status = Status.CONFORMS
        found.append(Observed(clause, runtime, status, tuple(lines)))
    return found, notes


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def render_entry(entry: Expectation) -> str:
    """The TOML table of one entry."""
    status = (
        _toml_string(entry.status[0].value)
        if len(entry.status) == 1
        else "[" + ", ".join(_toml_string(s.value) for s in entry.status) + "]"
    )
    out = [
        f"[{entry.clause}]",
        "runtimes = [" + ", ".join(_toml_string(r) for r in entry.runtimes) + "]",
        f"status = {status}",
    ]
    if entry.disagreements:
        out.append("disagreements = [")
        out.extend(f"    {_toml_string(line)}," for line in entry.disagreements)
        out.append("]")
    out.append(f"why = {_toml_string(entry.why)}")
    return "\n".join(out) + "\n"


def _span(lines: Sequence[str], clause: str) -> tuple[int, int]:
    """[start, end) of the table ``[clause]`` in a file's lines (trailing comments belong to the next)."""
    start = next(
        i for i, line in enumerate(lines) if (m := _HEADER.match(line.strip())) and m.group(1) == clause
    )
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


#: the file of the entries several runtimes share (``update`` moves an entry there once it covers several)
COMMON_FILE = "common.toml"

NEW_FILE_HEADER = (
    "# Expectations of .NET {runtime} that no other runtime shares (see conformance/suite/expectations.py).\n"
    "# One table per clause: runtimes, status, every disagreement line, and why.\n"
)
LAYER_FILE_HEADER = (
    "# Expectations of the column '{runtime}' that no other column shares (see\n"
    "# conformance/suite/expectations.py). One table per clause: runtimes, status, every disagreement line,\n"
    "# and why.\n"
)


class _Editor:
    """Text edits of the expectation files, kept as lines so comments elsewhere survive."""

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal

    def _lines(self, path: Path) -> list[str]:
        if path not in self.proposal.new:
            text = path.read_text() if path.is_file() else ""
            if path.is_file():
                self.proposal.old[path] = text
            self.proposal.new[path] = text
        return self.proposal.new[path].splitlines()

    def _store(self, path: Path, lines: list[str]) -> None:
        self.proposal.new[path] = "\n".join(lines).rstrip("\n") + "\n"

    def replace(self, old: Expectation, new: Expectation | None) -> None:
        lines = self._lines(old.file)
        start, end = _span(lines, old.clause)
        body = render_entry(new).rstrip("\n").splitlines() if new is not None else []
        if new is None and end < len(lines) and not lines[end].strip():
            end += 1  # drop the blank line that separated the removed table
        self._store(old.file, lines[:start] + body + lines[end:])

    def append(self, path: Path, entry: Expectation, runtime: str) -> None:
        lines = self._lines(path)
        if any((m := _HEADER.match(line.strip())) and m.group(1) == entry.clause for line in lines):
            raise InputError(
                f"{path}: already has a [{entry.clause}] table for other runtimes; move it before updating"
            )
        if not lines:
            header = NEW_FILE_HEADER if _VERSION.match(runtime) else LAYER_FILE_HEADER
            lines = header.format(runtime=runtime).rstrip("\n").splitlines()
        self._store(path, [*lines, "", *render_entry(entry).rstrip("\n").splitlines()])


def propose_update(run: Mapping[str, Any], directory: Path | None = None) -> Proposal:
    """The edit that makes the expectation files describe ``run`` (a ``conformance --json`` result).

    For each clause and runtime of the run: an entry that already describes it stays; a runtime with no
    entry for a departure joins an entry of another runtime whose status and disagreements are the same,
    else gets a new entry in ``<runtime>.toml`` whose ``why`` is :data:`WHY_PLACEHOLDER`; an entry whose
    disagreements changed is rewritten (keeping its reason); an entry for a clause that now conforms loses
    the runtime (or goes). An entry that covers a runtime by prefix is never narrowed: a note says so.
    """
    current = load_expectations(directory)
    proposal = Proposal(directory=current.directory)
    found, proposal.notes = observations(run)
    editor = _Editor(proposal)
    # entries are immutable: the latest form of each, by (file, clause), as the edits accumulate
    latest: dict[tuple[Path, str], Expectation] = {(e.file, e.clause): e for e in current.entries}

    def set_entry(old: Expectation, new: Expectation | None) -> None:
        editor.replace(old, new)
        if new is None:
            del latest[(old.file, old.clause)]
        else:
            latest[(old.file, old.clause)] = new

    for seen in found:
        entry = next((e for e in latest.values() if e.clause == seen.clause and e.covers(seen.runtime)), None)
        departs = seen.status is not Status.CONFORMS
        if entry is not None:
            if seen.status in entry.status and (
                seen.status is not Status.DIVERGES or set(entry.disagreements) == set(seen.disagreements)
            ):
                continue  # the entry describes the run
            if seen.runtime not in entry.runtimes:
                proposal.notes.append(
                    f"{seen.clause}[{seen.runtime}]: {entry.source} covers it by prefix"
                    f" ({', '.join(entry.runtimes)}) and no longer describes it; edit it by hand"
                )
                continue
            others = tuple(r for r in entry.runtimes if r != seen.runtime)
            if not departs:
                set_entry(entry, replace(entry, runtimes=others) if others else None)
                continue
            wanted = _wanted(seen, entry)
            if not others:
                set_entry(entry, replace(wanted, file=entry.file, line=entry.line))
                continue
            set_entry(entry, replace(entry, runtimes=others))
            _add(editor, latest, current, seen, wanted)
            continue
        if departs:
            _add(editor, latest, current, seen, _wanted(seen, None))
    _merge_identical(editor, latest, {seen.clause for seen in found}, current.directory / COMMON_FILE)
    return proposal


def _column_key(column: str) -> tuple[str, tuple[int, ...], str]:
    """Live columns first, then each layer's; versions in numeric order, a named column after them."""
    layer, rest = _layer_and_rest(column)
    if _VERSION.match(rest):
        return layer, tuple(int(part) for part in rest.split(".")), ""
    return layer, (2**31,), rest


def _merge_identical(
    editor: _Editor, latest: dict[tuple[Path, str], Expectation], clauses: Iterable[str], common: Path
) -> None:
    """Entries of one clause that now say the same (status, lines, reason) become one entry: an identical
    divergence is written once (kept in the entry with the most runtimes, common files first; an entry of a
    runtime's own file that now covers several runtimes moves to ``common.toml``)."""
    for clause in sorted(set(clauses)):
        groups: dict[tuple[object, ...], list[Expectation]] = {}
        for entry in (e for e in latest.values() if e.clause == clause):
            key = (entry.status, frozenset(entry.disagreements), entry.why)
            groups.setdefault(key, []).append(entry)
        for same in groups.values():
            if len(same) < 2:
                continue
            same.sort(key=lambda e: (-len(e.runtimes), _is_runtime_file(e.file), e.file.name))
            keeper, rest = same[0], same[1:]
            runtimes = {r for e in same for r in e.runtimes}
            for other in rest:
                editor.replace(other, None)
                del latest[(other.file, other.clause)]
            merged = replace(keeper, runtimes=tuple(sorted(runtimes, key=_column_key)))
            if _is_runtime_file(keeper.file) and common.is_file() and (common, clause) not in latest:
                editor.replace(keeper, None)
                del latest[(keeper.file, keeper.clause)]
                merged = replace(merged, file=common)
                editor.append(common, merged, "")
            else:
                editor.replace(keeper, merged)
            latest[(merged.file, merged.clause)] = merged


def _is_runtime_file(path: Path) -> bool:
    """A file of one column's own entries: a version's (8.0.4.toml) or a layer's column's (emu-8.0.4.toml)."""
    layer, rest = _layer_and_rest(path.stem.replace("-", " ", 1))
    return bool(_VERSION.match(rest) or layer)


def column_file(directory: Path, column: str) -> Path:
    """The file of one column's own entries: ``8.0.4.toml``, ``emu-8.0.4.toml``, ``emu-x86-hooks.toml``."""
    return directory / f"{column.replace(' ', '-')}.toml"


def _wanted(seen: Observed, like: Expectation | None) -> Expectation:
    """The entry that describes ``seen``; the reason of ``like`` is kept when its status still holds."""
    keep_why = like is not None and seen.status in like.status
    why = like.why if like is not None and keep_why else f"{WHY_PLACEHOLDER}: why does {seen.runtime} differ?"
    status = like.status if like is not None and keep_why else (seen.status,)
    return Expectation(
        clause=seen.clause,
        runtimes=(seen.runtime,),
        status=status,
        why=why,
        disagreements=seen.disagreements if seen.status is Status.DIVERGES else (),
    )


def _add(
    editor: _Editor,
    latest: dict[tuple[Path, str], Expectation],
    current: ExpectationSet,
    seen: Observed,
    wanted: Expectation,
) -> None:
    """Give ``seen.runtime`` an entry: join an identical one of another runtime, or a new one."""
    for (path, clause), other in list(latest.items()):
        if clause != seen.clause or other.covers(seen.runtime):
            continue
        same_lines = set(other.disagreements) == set(wanted.disagreements)
        if seen.status in other.status and same_lines:
            joined = replace(other, runtimes=(*other.runtimes, seen.runtime))
            editor.replace(other, joined)
            latest[(path, clause)] = joined
            return
    target = column_file(current.directory, seen.runtime)
    placed = replace(wanted, file=target)
    editor.append(target, placed, seen.runtime)
    latest[(target, seen.clause)] = placed
