"""What the hook checker reports: findings (one per rule broken, aggregated over runs), notes (what the
runtime does not rely on: told, never a failure), the runs it could not emulate and why, and the report."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from clr_model.function_enter import HOOK_RULES

__all__ = ["HookFinding", "HookReport", "NotEmulated", "aggregate", "aggregate_reasons", "render_text",
           "report_json"]


class HookFinding(BaseModel):
    """One rule broken: the clause, the rule (a key of ``HOOK_RULES``), what and where.

    ``register_name`` (JSON: ``register``), ``before``, ``after``: a register or stack pointer the hook gave
    back changed;
    ``instruction``: ``location: disassembly`` (capstone) of the instruction that changed the register,
    made the access or the branch, or returned; ``detail``: one line without per-run addresses, so findings
    of different runs aggregate. ``runs``/``first_run``: in how many runs it was seen and the first (0-based);
    the values are those of the first run. ``note``: what the runtime does not rely on (the x86 EFLAGS
    status flags): told, never a finding (a report keeps notes apart, :attr:`HookReport.notes`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clause: str
    rule: str
    detail: str
    register_name: str | None = Field(default=None, serialization_alias="register")
    before: int | None = Field(default=None, ge=0)
    after: int | None = Field(default=None, ge=0)
    instruction: str | None = None
    target: str | None = None
    runs: int = 1
    first_run: int = 0
    note: bool = False

    @field_serializer("before", "after")
    def _hex(self, value: int | None) -> str | None:
        return None if value is None else f"{value:#x}"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.clause, self.rule, self.detail, self.instruction or "")

    @property
    def line(self) -> str:
        """A stable one-line summary (no addresses): what a verdict lists as a disagreement."""
        return f"{self.clause}: {HOOK_RULES[self.rule][1]}: {self.detail}"


class NotEmulated(BaseModel):
    """Why runs ended as *not emulated*: the hook reached what the emulator never provided (a pointer the
    profiler's Initialize would have set, an argument the emulator drew at random, thread-local storage it
    did not set up, a call it cannot answer). ``reason`` has no per-run address, so runs aggregate;
    ``instruction`` is where (``location: disassembly``); ``runs``/``first_run``: as a finding's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    instruction: str | None = None
    runs: int = 1
    first_run: int = 0


class HookReport(BaseModel):
    """A whole check: the input, the hook's kind, how it ran, the findings (empty: every rule held in the
    runs emulated), the notes, and the runs not emulated with their reasons (never findings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file: str
    symbol: str
    arch: str
    #: how the runtime calls the hook (clr_model.abi.KINDS): enter2, fast or slow
    kind: str = "enter2"
    seed: int
    runs: int
    budget: int
    #: runs that reached the return address (the others stopped on a finding or were not emulated)
    returned: int
    #: runs that ended on something the emulator never provided (:attr:`not_emulated_reasons` says what)
    not_emulated: int = 0
    instructions_min: int
    instructions_max: int
    unapplied_relocations: int = 0
    findings: tuple[HookFinding, ...] = ()
    notes: tuple[HookFinding, ...] = ()
    not_emulated_reasons: tuple[NotEmulated, ...] = ()
    #: slow kind: the globals the checker found the hook's ICorProfilerInfo pointer in (its stand-in there)
    info_pointers: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No rule broken (notes and runs not emulated are never failures)."""
        return not self.findings

    @property
    def emulated(self) -> int:
        """Runs the emulator followed to their end (a return or a finding): what the rules were judged on."""
        return self.runs - self.not_emulated


def aggregate(per_run: Sequence[Sequence[HookFinding]]) -> tuple[HookFinding, ...]:
    """Merge the runs' findings by (clause, rule, detail, instruction), keeping the first run's values;
    sorted by clause, then by the first run and order seen."""
    merged: dict[tuple[str, str, str, str], HookFinding] = {}
    order: dict[tuple[str, str, str, str], tuple[int, int]] = {}
    for i, findings in enumerate(per_run):
        for j, f in enumerate(findings):
            seen = merged.get(f.key)
            if seen is None:
                merged[f.key] = f.model_copy(update={"runs": 1, "first_run": i})
                order[f.key] = (i, j)
            else:
                merged[f.key] = seen.model_copy(update={"runs": seen.runs + 1})
    return tuple(sorted(merged.values(), key=lambda f: (f.clause, order[f.key])))


def aggregate_reasons(per_run: Sequence[tuple[str, str | None] | None]) -> tuple[NotEmulated, ...]:
    """Merge the runs' reasons for not being emulated by (reason, instruction), in order first seen."""
    merged: dict[tuple[str, str | None], NotEmulated] = {}
    for i, why in enumerate(per_run):
        if why is None:
            continue
        seen = merged.get(why)
        merged[why] = (NotEmulated(reason=why[0], instruction=why[1], first_run=i) if seen is None
                       else seen.model_copy(update={"runs": seen.runs + 1}))
    return tuple(merged.values())


def _hex(value: int | None) -> str:
    return "" if value is None else f"{value:#x}"


def _table(findings: Sequence[HookFinding]) -> list[str]:
    rows = [("clause", "rule", "register", "before", "after", "instruction", "runs", "detail")]
    for f in findings:
        rows.append((f.clause, f.rule, f.register_name or "", _hex(f.before), _hex(f.after),
                     f.instruction or "", str(f.runs), f.detail))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]


def render_text(report: HookReport) -> str:
    """A summary line, then a table of findings (clause, rule, register, before, after, instruction), the
    notes likewise, and the reasons runs were not emulated."""
    head = (f"{report.symbol} in {report.file} ({report.arch}, {report.kind}): {report.runs} runs from seed "
            f"{report.seed}, {report.returned} returned, {report.instructions_min}-{report.instructions_max} "
            "instructions")
    if report.not_emulated:
        head += f", {report.not_emulated} not emulated"
    lines = [head]
    if report.emulated == 0:
        lines.append(f"no run could be emulated: no rule was judged ({len(report.findings)} finding(s) seen "
                     "before the runs left what the emulator follows)")
    if report.findings:
        lines += [f"{len(report.findings)} rule(s) broken:", *_table(report.findings)]
    elif report.emulated:
        lines.append("every rule holds")
    if report.notes:
        lines += [f"{len(report.notes)} note(s), what the runtime does not rely on (never a failure):",
                  *_table(report.notes)]
    if report.info_pointers:
        lines.append(f"ICorProfilerInfo calls answered through {', '.join(report.info_pointers)}")
    for why in report.not_emulated_reasons:
        where = f" at {why.instruction}" if why.instruction else ""
        lines.append(f"not emulated in {why.runs} run(s){where}: {why.reason}")
    return "\n".join(line.rstrip() for line in lines)


def report_json(report: HookReport) -> str:
    """The stable JSON form (keys in declaration order, values of registers as hex strings)."""
    return report.model_dump_json(indent=2, by_alias=True)
