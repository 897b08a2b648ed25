"""The probe's trace: pydantic models of its records and a reader that keeps every good record.

The probe writes JSON Lines (``docs/design.md``): one record per line, each flushed with one write, so a
crash or SIGKILL loses at most the line being written; or, with PROFHARNESS_TRACE_FORMAT=binary, the same
records as frames (:mod:`conformance.core.binary_trace`, read back into the same records).
:func:`read_trace` parses a trace and reports the first malformed line as ``file:line: what is wrong``
while keeping every good record before it; a torn last line (no newline at the end of the file) or frame is
the mark of a killed process, not corruption.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from clr_model.words import U64
from conformance.core import interrupt
from conformance.core.binary_trace import raw_records
from conformance.core.errors import HarnessError
from conformance.core.frames import MAGIC as FRAMES_MAGIC

R = TypeVar("R", bound=BaseModel)
HR = Annotated[int, Field(ge=0, lt=2**32, description="HRESULT as unsigned 32-bit")]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    seq: int = Field(ge=0)
    os_tid: int = Field(ge=0)
    tid: U64 | None = None


class RuntimeInfo(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    clr_type: int | str | None = None
    major: int
    minor: int
    build: int
    qfe: int

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}.{self.build}"


class HeaderRecord(_Record):
    kind: Literal["header"]
    probe: str
    pid: int
    runtime: RuntimeInfo | None = None
    plan: dict[str, Any] = Field(default_factory=dict)
    context_size: int | None = None


class CallbackRecord(_Record):
    kind: Literal["callback"]
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    hr: HR = 0


class CallRecord(_Record):
    kind: Literal["call"]
    name: str
    experiment: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    out: dict[str, Any] = Field(default_factory=dict)
    hr: HR


class FrameRegisters(BaseModel):
    """The registers a frame record read from the CONTEXT the runtime passed its callback."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rip: U64
    rsp: U64
    rbp: U64


class FrameRecord(_Record):
    """One StackSnapshotCallback invocation."""

    kind: Literal["frame"]
    walk: int = Field(ge=0)
    index: int = Field(ge=0)
    funcId: U64
    ip: U64
    frameInfo: U64 = 0
    clientData: U64 = 0
    contextSize: int = 0
    context: FrameRegisters | None = None
    hr: HR = 0


class MarkRecord(_Record):
    kind: Literal["mark"]
    name: str
    payload: str | None = None


class CountsRecord(_Record):
    kind: Literal["counts"]
    counts: dict[str, int]


class ProbeErrorRecord(_Record):
    kind: Literal["probe_error"]
    what: str
    where: str = ""


class EndRecord(_Record):
    kind: Literal["end"]


Record = Annotated[
    HeaderRecord
    | CallbackRecord
    | CallRecord
    | FrameRecord
    | MarkRecord
    | CountsRecord
    | ProbeErrorRecord
    | EndRecord,
    Field(discriminator="kind"),
]

RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)


def record_schema() -> dict[str, Any]:
    """JSON Schema of one trace record (``profharness schema trace``)."""
    schema = RECORD_ADAPTER.json_schema()
    schema["title"] = "profharness trace record"
    schema["description"] = "One line of a profharness probe trace (JSON Lines). See docs/design.md."
    return schema


class TraceProblem(BaseModel):
    """Why a trace stopped parsing: ``file:line: what``."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


class Trace(BaseModel):
    """The good records of a trace, and what (if anything) stopped the reading."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    records: list[Record]
    problem: TraceProblem | None = None
    #: The last line had no newline: the writer died in the middle of it (SIGKILL, crash).
    torn_tail: bool = False

    @property
    def header(self) -> HeaderRecord | None:
        for record in self.records:
            if isinstance(record, HeaderRecord):
                return record
        return None

    @property
    def ended(self) -> bool:
        """The probe saw Shutdown: the process ended normally."""
        return any(isinstance(r, EndRecord) for r in self.records)

    def of_kind(self, kind: type[R]) -> list[R]:
        return [r for r in self.records if isinstance(r, kind)]

    def callbacks(self, name: str | None = None) -> list[CallbackRecord]:
        return [r for r in self.of_kind(CallbackRecord) if name is None or r.name == name]

    def calls(self, name: str | None = None, experiment: str | None = None) -> list[CallRecord]:
        return [
            r
            for r in self.of_kind(CallRecord)
            if (name is None or r.name == name) and (experiment is None or r.experiment == experiment)
        ]

    def marks(self, name: str | None = None) -> list[MarkRecord]:
        return [r for r in self.of_kind(MarkRecord) if name is None or r.name == name]

    def mark(self, name: str) -> MarkRecord:
        """The one mark ``name`` the scenario makes; none or several is a HarnessError."""
        found = self.marks(name)
        if len(found) != 1:
            raise HarnessError(
                f"{self.path}: expected one mark {name!r}, found {len(found)} (did the scenario run?)"
            )
        return found[0]

    def frames(self, walk: int) -> list[FrameRecord]:
        return sorted((r for r in self.of_kind(FrameRecord) if r.walk == walk), key=lambda r: r.index)

    def last_callback(self) -> CallbackRecord | None:
        found = self.callbacks()
        return found[-1] if found else None

    def final_counts(self) -> dict[str, int]:
        counts = self.of_kind(CountsRecord)
        return dict(counts[-1].counts) if counts else {}


def _describe(error: ValidationError, kind: object) -> str:
    first = error.errors()[0]
    loc = list(first["loc"])
    if loc and loc[0] == kind:  # the discriminator's branch, already named below
        loc = loc[1:]
    where = ".".join(str(p) for p in loc)
    prefix = f"{kind} record: " if isinstance(kind, str) else ""
    return f"{prefix}{where}: {first['msg']}" if where else f"{prefix}{first['msg']}"


def read_trace(path: Path, *, strict: bool = False) -> Trace:
    """Parse a trace file, JSON Lines or binary (:func:`conformance.core.binary_trace.raw_records`).

    Reading stops at the first malformed record; everything before it is kept and the problem is
    returned in :attr:`Trace.problem`. A torn final record (a line without its newline, a torn frame) is not
    a problem: it is recorded as :attr:`Trace.torn_tail`. With ``strict`` a problem raises
    :class:`HarnessError` (``file:line: what``; for a binary trace the record's ordinal in place of the line).
    """
    if not path.is_file():
        raise HarnessError(f"{path}: no trace file (the probe did not start, or wrote elsewhere)")
    records: list[Record] = []
    problem: TraceProblem | None = None
    torn = False
    seen: set[int] = set()
    for number, data, what in raw_records(path):
        if data is None:
            if what is None:
                torn = True
            else:
                problem = TraceProblem(path=str(path), line=number, what=what)
            break
        try:
            record = RECORD_ADAPTER.validate_python(data)
        except ValidationError as exc:
            problem = TraceProblem(path=str(path), line=number, what=_describe(exc, data.get("kind")))
            break
        if record.seq in seen:
            problem = TraceProblem(path=str(path), line=number, what=f"seq {record.seq} appears twice")
            break
        seen.add(record.seq)
        records.append(record)
    if problem is not None and strict:
        raise HarnessError(str(problem))
    return Trace(path=path, records=records, problem=problem, torn_tail=torn)


#: Every complete line of a trace at once: one pydantic call parses and validates them all.
_RECORDS_ADAPTER: TypeAdapter[list[Record]] = TypeAdapter(list[Record])


def read_trace_whole(path: Path) -> Trace:
    """:func:`read_trace` for a trace that is expected to be good (the fake runtime's, read once per fuzz
    example): every complete line parsed and validated by one pydantic call on the file's bytes instead of
    ``json.loads`` and a validation per line, about three times faster. The same records, validated the
    same way, and the same :class:`Trace`: anything irregular (a record that does not validate, a blank
    line, a line holding no or two values, a repeated seq, bytes that are not UTF-8) is read again by
    :func:`read_trace`, which finds and reports it as ``file:line``."""
    try:
        with interrupt.opening(lambda: path.open("rb")) as handle:  # a signal never leaves it open
            data = handle.read()
    except OSError:
        return read_trace(path)
    if data.startswith(FRAMES_MAGIC):  # a binary trace: one reader for it
        return read_trace(path)
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty, or the torn line of a killed writer
    try:
        records = _RECORDS_ADAPTER.validate_json(b"[" + b",".join(lines) + b"]")
    except ValidationError:
        return read_trace(path)
    if len(records) != len(lines) or len({r.seq for r in records}) != len(records):
        return read_trace(path)
    return Trace.model_construct(path=path, records=records, problem=None, torn_tail=bool(tail))
