"""The fuzzing engines, the session that runs them against one profiler, shrinking, and reproducers.

Two engines choose the events; both run the same rules (:data:`conformance.fuzz.program.RULES`, whose
preconditions are the model's ordering: Initialize first and Shutdown last, as every example starts and
ends the profiler; a class loads from a loaded module; a method is JIT-compiled for a loaded class; objects
are allocated of loaded classes on live threads; MovedReferences2 only inside a GC, MR2-01, and
MovedReferences after it unless it failed, MR2-11/12, which the fake runtime drops then):

- ``program`` (the default, for throughput): hypothesis draws one byte string per example and
  :func:`~conformance.fuzz.program.decode` interprets it; after hypothesis' shrinking, whole steps are cut
  out while the failure stays the same (:func:`polish`), so a reproducer keeps only the steps it needs;
- ``stateful``: :class:`FuzzMachine`, hypothesis' ``RuleBasedStateMachine`` with one rule per
  :class:`~conformance.fuzz.program.StepRule` (its parameters one byte string each).

The steps only compute the world (:class:`~conformance.fuzz.world.World`) and the commands; the example
runs in the reused fake runtime child, and its findings (:func:`~conformance.fuzz.judge.judge`) fail it. A
failure is shrunk and saved as a reproducer (JSON: the profiler, the CLSID, the commands, the findings)
that :func:`replay` plays again in a fresh child.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import __version__ as hypothesis_version
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, precondition, rule

from conformance.core import interrupt
from conformance.core.errors import HarnessError, InputError
from conformance.core.findings import Finding
from conformance.fuzz.behaviours import DEFAULT_WORLD, WORLDS
from conformance.fuzz.child import DEFAULT_HANG_S, FakeRuntime
from conformance.fuzz.database import hypothesis_storage, open_database
from conformance.fuzz.ilpool import default_pool
from conformance.fuzz.judge import judge
from conformance.fuzz.names import Dictionary, profiler_strings, read_app
from conformance.fuzz.program import RULES, Reader, StepRule, decode, without_step
from conformance.fuzz.world import World, world_of
from conformance.validator.launch import check_profiler

REPRODUCER_FORMAT = "profharness-fuzz-reproducer 1"
ENGINES = ("program", "stateful")
#: Bytes a program has per step it may take (a step reads 1 to about 50 bytes, 7 on average).
BYTES_PER_STEP = 8
#: A stateful rule's parameter block is at most this long (the longest step reads about 50 bytes).
RULE_BYTES = 64
#: Passes of :func:`polish` over the steps at most.
POLISH_PASSES = 3
#: What :func:`hypothesis.target` maximises: the distinct runtime methods an example's profiler called.
TARGET_LABEL = "distinct runtime calls"


class FuzzFailure(AssertionError):
    """An example broke a rule (or crashed, or hung): its findings, its commands, and (program engine)
    its bytes."""

    def __init__(
        self, findings: list[Finding], commands: list[dict[str, Any]], data: bytes | None = None
    ) -> None:
        super().__init__("; ".join(f.line() for f in findings[:3]))
        self.findings = findings
        self.commands = commands
        self.data = data


class TimeUp(KeyboardInterrupt):
    """``--time`` is up: raised from inside the test, so hypothesis stops within the example (between
    chunks was up to ``chunk`` examples late). A :class:`KeyboardInterrupt`, because hypothesis lets those
    through at once without saving the example as a failure (any other exception, even a BaseException,
    is saved to the database and shrunk as one)."""


_FAILURE_TYPES: dict[frozenset[str], type[FuzzFailure]] = {}


def clauses_of(findings: Iterable[Finding]) -> frozenset[str]:
    return frozenset(f.clause for f in findings)


def failure(
    findings: list[Finding], commands: list[dict[str, Any]], data: bytes | None = None
) -> FuzzFailure:
    """A :class:`FuzzFailure` whose type names its clauses: hypothesis tells failures apart by type, so
    each distinct failure is shrunk as itself (a shrunk MR2-17 does not turn into a crash)."""
    key = clauses_of(findings)
    kind = _FAILURE_TYPES.get(key)
    if kind is None:
        kind = type("FuzzFailure_" + "_".join(sorted(c.replace("-", "") for c in key)), (FuzzFailure,), {})
        _FAILURE_TYPES[key] = kind
    return kind(findings, commands, data)


@dataclass
class Session:
    """One profiler under fuzzing: the child, where traces go, what was run and found."""

    runtime: FakeRuntime
    workdir: Path
    steps: int = 30
    examples: int = 0
    events: int = 0
    seconds_in_child: float = 0.0
    seconds_judging: float = 0.0
    progress: Callable[[Session], None] | None = None
    progress_every: int = 100
    #: called after every example is judged (its number is ``examples``; ``first_failure`` is set once one
    #: failed): what a caller (a test) can wait for, instead of a time
    on_example: Callable[[Session], None] | None = None
    #: the example (1-based) that failed first, before shrinking
    first_failure: int | None = None
    #: that example's failure (kept when the run is interrupted before its shrinking ends)
    first_found: FuzzFailure | None = None
    #: ``time.monotonic()`` after which no new example starts (``--time``; a found failure is still shrunk)
    stop_at: float | None = None
    #: the world the examples are made in (:data:`conformance.fuzz.behaviours.WORLDS`)
    world: str = DEFAULT_WORLD
    #: the names the world draws besides invented ones (:mod:`conformance.fuzz.names`)
    dictionary: Dictionary = field(default_factory=Dictionary)
    #: the profiler's runtime calls reached: method -> [examples that made it, calls]
    reached: dict[str, list[int]] = field(default_factory=dict)
    #: the distinct methods the last example called (what :func:`hypothesis.target` steers up)
    last_distinct: int = 0

    @property
    def trace(self) -> Path:
        return self.workdir / "trace.jsonl"

    def run(self, commands: list[dict[str, Any]], events: int, data: bytes | None = None) -> list[Finding]:
        """Run and judge one example (``data``: its bytes, program engine); its findings."""
        outcome = self.runtime.run_example(self.trace, commands)
        # an example the signal's kill_tree ended is not judged (a crash it is not), also when the
        # Interrupted was raised where Python drops it (interrupt._unraisable)
        interrupt.check()
        self.examples += 1
        self.events += events
        self.seconds_in_child += outcome.seconds
        if self.progress is not None and self.examples % self.progress_every == 0:
            self.progress(self)
        began = time.perf_counter()
        calls: Counter[str] = Counter()
        with interrupt.deferred():  # a judged failure is kept: the signal waits the few ms of judging
            findings = judge(self.trace, outcome, commands, calls)
            self.seconds_judging += time.perf_counter() - began
            for name, n in calls.items():
                tally = self.reached.setdefault(name, [0, 0])
                tally[0] += 1
                tally[1] += n
            self.last_distinct = len(calls)
            if findings and self.first_failure is None:
                self.first_failure = self.examples
                self.first_found = failure(findings, commands, data)
        if self.on_example is not None:
            self.on_example(self)
        return findings

    def check(self, world: World, data: bytes | None = None) -> None:
        """Run one example; raise its failure if it has findings (:class:`TimeUp` instead, before it runs,
        once :attr:`stop_at` is past while no failure is found)."""
        if self.stop_at is not None and self.first_found is None and time.monotonic() >= self.stop_at:
            raise TimeUp
        findings = self.run(world.commands, world.events, data)
        # toward examples where the profiler makes more distinct runtime calls (reaches more of its code)
        target(float(self.last_distinct), label=TARGET_LABEL)
        if findings:
            raise failure(findings, world.commands, data)


# --- the engines --------------------------------------------------------------------------------------


def program_test(session: Session, config: settings) -> Callable[[], None]:
    """The program engine: one byte string per example, decoded into at most ``session.steps`` steps. Its
    size is fixed (a variable size costs hypothesis a draw per byte); programs end early by their op bytes,
    and :func:`polish` cuts steps out."""
    size = session.steps * BYTES_PER_STEP

    @config
    @given(st.binary(min_size=size, max_size=size))
    def fuzz_program(data: bytes) -> None:
        session.check(decode(data, session.steps, session.world, session.dictionary).world, data)

    return fuzz_program


class FuzzMachine(RuleBasedStateMachine):
    """The stateful engine: one hypothesis rule per :data:`~conformance.fuzz.program.RULES` entry, with
    its precondition; the example runs at teardown. ``session`` is set per fuzzing run."""

    session: Session

    def __init__(self) -> None:
        super().__init__()
        self.world = World(world=self.session.world, dictionary=self.session.dictionary)

    def teardown(self) -> None:
        self.session.check(self.world)


def _stateful_rule(spec: StepRule) -> Callable[..., None]:
    def step(self: FuzzMachine, params: bytes) -> None:
        spec.run(self.world, Reader(params))

    step.__name__ = spec.name
    guarded = precondition(lambda self: spec.allowed(self.world))(step)
    return rule(params=st.binary(max_size=RULE_BYTES))(guarded)


for _spec in RULES:
    setattr(FuzzMachine, _spec.name, _stateful_rule(_spec))


def stateful_test(session: Session, config: settings) -> Callable[[], None]:
    machine = type("FuzzMachineRun", (FuzzMachine,), {"session": session})
    test: Callable[[], None] = get_state_machine_test(
        machine, settings=settings(config, stateful_step_count=session.steps)
    )
    return test


# --- shrinking further --------------------------------------------------------------------------------


def polish(session: Session, found: FuzzFailure) -> FuzzFailure:
    """Cut whole steps out of a program engine failure while it fails with the same clauses; hypothesis'
    shrinker cuts bytes, which can leave a step it could not remove whole."""
    if found.data is None:
        return found
    want = clauses_of(found.findings)
    best = found
    data = found.data
    for _ in range(POLISH_PASSES):
        changed = False
        program = decode(data, session.steps, session.world, session.dictionary)
        i = len(program.spans) - 1
        while i >= 0:
            candidate = without_step(data, program.spans, i)
            trial = decode(candidate, session.steps, session.world, session.dictionary)
            findings = session.run(trial.world.commands, trial.world.events)
            if findings and clauses_of(findings) == want:
                data, program, changed = candidate, trial, True
                best = failure(findings, trial.world.commands, data)
                i = min(i, len(program.spans))
            i -= 1
        if not changed:
            break
    return best


# --- the example database ----------------------------------------------------------------------------


class ProfilerDatabase(ExampleDatabase):
    """A hypothesis database whose keys name the profiler (its sha256), so several machines (and several
    profilers) share one directory: each profiler replays only its own failures."""

    def __init__(self, inner: ExampleDatabase, profiler_digest: str) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = profiler_digest.encode() + b":"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- fuzzing ------------------------------------------------------------------------------------------


@dataclass
class FuzzReport:
    """What a fuzzing run did and found (the first failure, shrunk)."""

    profiler: str
    clsid: str
    examples: int
    events: int
    seconds: float
    findings: list[Finding] = field(default_factory=list)
    reproducer: Path | None = None
    restarts: int = 0
    #: the example that failed first (before shrinking), None without findings
    first_failure: int | None = None
    #: the shrunk failure's events
    reproducer_events: int = 0
    #: where the time went: the child (delivering, the profiler), the judge (reading, the rules)
    seconds_in_child: float = 0.0
    seconds_judging: float = 0.0
    #: SIGINT/SIGTERM stopped the run; a failure found before it is reported (and its reproducer saved)
    #: as far as it was shrunk
    interrupted: bool = False
    #: the reproducer is the shrunk failure (False: as found, or as far as the shrinking got)
    shrunk: bool = False
    #: the profiler's runtime calls the examples reached: method -> (examples that made it, calls)
    reached: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: names in the dictionary: the profiler's strings, the app's types (``--app``)
    strings: int = 0
    app_types: int = 0

    def reach_table(self) -> list[str]:
        """The reached calls as text lines (most examples first): method, examples, calls."""
        if not self.reached:
            return ["no runtime calls reached"]
        rows = sorted(self.reached.items(), key=lambda kv: (-kv[1][0], kv[0]))
        width = max(len("method"), *(len(name) for name, _ in rows))
        lines = [f"{'method':<{width}}  {'examples':>8}  {'calls':>8}"]
        lines += [f"{name:<{width}}  {ex:>8}  {n:>8}" for name, (ex, n) in rows]
        return lines


#: While fuzzing, the collector's youngest generation collects after this many new objects (Python's
#: default: 700). An example builds a few thousand short-lived objects (records, events): at 700 the
#: collector ran several times per example over objects about to die anyway.
YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def collector_for_fuzzing() -> Iterator[None]:
    """The garbage collector set for fuzzing, and set back after: the objects alive when it begins (the
    harness's modules, hypothesis, numpy: tens of thousands) are left out of its passes (:func:`gc.freeze`;
    not when the caller has frozen objects itself: undoing that would undo theirs), and its youngest
    generation waits for :data:`YOUNG_THRESHOLD` new objects. Measured at 12 steps per example: the
    collector took about 0.3 ms per example before, 0.04 ms with both."""
    freeze = gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    if freeze:
        gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


def reproducer_json(
    profiler: Path, clsid: str, found: FuzzFailure, env: Mapping[str, str] | None = None,
    given: Path | None = None, dictionary: Dictionary | None = None,
) -> dict[str, Any]:
    """The reproducer of ``found``: ``profiler`` is the library's resolved path, ``given`` (default: the
    same) as the user named it (see :func:`replay_target`); ``dictionary``: the names its program drew
    from (kept so the program decodes to its commands anywhere)."""
    extra = {"dictionary": dictionary.to_json()} if dictionary else {}
    return {**extra,
        "format": REPRODUCER_FORMAT,
        "profiler": str(profiler),
        "profiler_given": str(given if given is not None else profiler),
        "clsid": clsid,
        "env": dict(env or {}),
        "findings": [{"clause": f.clause, "callback": f.callback, "message": f.message}
                     for f in found.findings],
        "program": found.data.hex() if found.data is not None else None,
        "commands": found.commands,
    }


def _failures(exc: BaseException) -> list[FuzzFailure]:
    if isinstance(exc, FuzzFailure):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [f for e in exc.exceptions for f in _failures(e)]
    return []


def fuzz(
    profiler: Path,
    clsid: str,
    *,
    max_examples: int = 500,
    seed: int | None = None,
    time_limit: float | None = None,
    database: Path | str | None = None,
    reproducer: Path | None = None,
    hang_s: float = DEFAULT_HANG_S,
    steps: int = 30,
    progress: Callable[[Session], None] | None = None,
    chunk: int = 500,
    shrink: bool = True,
    engine: str = "program",
    env: Mapping[str, str] | None = None,
    fresh: bool = False,
    on_example: Callable[[Session], None] | None = None,
    world: str = DEFAULT_WORLD,
    strings: bool = True,
    app: Path | None = None,
) -> FuzzReport:
    """Fuzz ``profiler`` until a failure (shrunk, saved to ``reproducer``), ``max_examples`` examples or
    ``time_limit`` seconds. ``seed`` makes the run deterministic (chunk k uses seed + k). ``env`` is set in
    the fake runtime's environment (and kept in the reproducer; ``{workdir}`` in a value is the run's
    directory); ``fresh`` runs every example in a new fake runtime process. ``profiler`` may be a bare
    file name in the current folder (it is resolved as ``validate`` resolves it); ``database`` is a folder
    or a ``redis://`` URL (:func:`conformance.fuzz.database.open_database`), None for none; hypothesis'
    own files go under the harness cache (:func:`conformance.fuzz.database.hypothesis_storage`). Once
    ``time_limit`` is past no new example starts (a failure found before it is still shrunk).
    ``on_example(session)`` is called after every example is judged (see :attr:`Session.on_example`).
    ``world``: ``observed`` (only what the bundled runtimes were seen to do) or ``documented`` (also what
    only a document allows): docs/fake-runtime.md. The world's names are drawn also from the profiler's
    own strings (``strings``) and the metadata of the assembly ``app`` (:mod:`conformance.fuzz.names`);
    hypothesis steers toward examples whose profiler makes more distinct runtime calls, and the report
    says which calls were reached (:attr:`FuzzReport.reached`)."""
    if engine not in ENGINES:
        raise InputError(f"fuzz engine {engine!r} is not one of {', '.join(ENGINES)}")
    if world not in WORLDS:
        raise InputError(f"fuzz world {world!r} is not one of {', '.join(WORLDS)}")
    began = time.monotonic()
    given, profiler = profiler, check_profiler(profiler)
    dictionary = read_app(app) if app is not None else Dictionary()
    if strings:
        dictionary = replace(dictionary, strings=profiler_strings(profiler))
    pool = default_pool()  # the methods' IL bodies (behaviour il.body): an installed runtime's CoreLib's
    dictionary = replace(dictionary, il=pool.bodies, il_from=pool.path)
    db: ExampleDatabase | None = None
    if database is not None:
        db = ProfilerDatabase(open_database(database), file_digest(profiler))
    make_test = program_test if engine == "program" else stateful_test
    with collector_for_fuzzing(), hypothesis_storage(), tempfile.TemporaryDirectory(
        prefix="profharness-fuzz-"
    ) as tmp, FakeRuntime(profiler, clsid, hang_s=hang_s, env=env, workdir=Path(tmp), fresh=fresh) as runtime:
        session = Session(runtime, Path(tmp), steps=steps, progress=progress, on_example=on_example,
                          world=world, dictionary=dictionary)
        if time_limit is not None:
            session.stop_at = began + time_limit
        report = FuzzReport(str(given), clsid, 0, 0, 0.0, strings=len(dictionary.strings),
                            app_types=len(dictionary.app_types))
        found_so_far: list[FuzzFailure] = []
        try:
            _fuzz_chunks(session, report, found_so_far, make_test, profiler=profiler, clsid=clsid,
                         given=given, max_examples=max_examples, seed=seed, time_limit=time_limit,
                         began=began, db=db, reproducer=reproducer, chunk=chunk, shrink=shrink,
                         env=env)  # fmt: skip
        except interrupt.Interrupted:
            report.interrupted = True
            best = found_so_far[-1] if found_so_far else session.first_found
            if best is not None and not report.findings:
                _report_failure(report, best, shrunk=False, profiler=profiler, clsid=clsid,
                                reproducer=reproducer, env=env, given=given,
                                dictionary=session.dictionary)  # fmt: skip
        report.examples = session.examples
        report.events = session.events
        report.restarts = runtime.restarts
        report.first_failure = session.first_failure
        report.seconds_in_child = session.seconds_in_child
        report.seconds_judging = session.seconds_judging
        report.reached = {name: (ex, n) for name, (ex, n) in session.reached.items()}
    report.seconds = time.monotonic() - began
    return report


def _report_failure(report: FuzzReport, found: FuzzFailure, *, shrunk: bool, profiler: Path, clsid: str,
                    reproducer: Path | None, env: Mapping[str, str] | None,
                    given: Path | None = None, dictionary: Dictionary | None = None) -> None:  # fmt: skip
    """``found`` is the run's failure: its findings in the report, its reproducer saved."""
    with interrupt.deferred():  # a signal does not leave half a reproducer
        report.findings = found.findings
        report.shrunk = shrunk
        report.reproducer_events = sum(1 for c in found.commands if c.get("op") == "event")
        if reproducer is not None:
            reproducer.parent.mkdir(parents=True, exist_ok=True)
            reproducer.write_text(json.dumps(reproducer_json(profiler, clsid, found, env, given, dictionary),
                                             indent=1))
            report.reproducer = reproducer


#: where hypothesis' ``@seed`` leaves a test's settings (with ``database=None``)
_SETTINGS_ATTRIBUTE = "_hypothesis_internal_use_settings"


def seeded(test: Callable[[], None], seed: int, db: ExampleDatabase | None) -> Callable[[], None]:
    """``test`` with hypothesis' ``@seed(seed)``, and ``db`` kept: ``@seed`` drops the database (a seeded
    test replays nothing), but a seeded run given a database (``--seed`` with ``--database``: one machine of
    a fleet) replays its examples first and saves what it finds there, then generates as the seed says."""
    test = hypothesis_seed(seed)(test)
    if db is not None:
        dropped = getattr(test, _SETTINGS_ATTRIBUTE, None)
        if not isinstance(dropped, settings):
            raise HarnessError(
                f"hypothesis {hypothesis_version}: @seed left no settings to give the database back to"
            )
        setattr(test, _SETTINGS_ATTRIBUTE, settings(dropped, database=db))
    return test


def _fuzz_chunks(
    session: Session,
    report: FuzzReport,
    found_so_far: list[FuzzFailure],
    make_test: Callable[[Session, settings], Callable[[], None]],
    *,
    profiler: Path,
    clsid: str,
    given: Path,
    max_examples: int,
    seed: int | None,
    time_limit: float | None,
    began: float,
    db: ExampleDatabase | None,
    reproducer: Path | None,
    chunk: int,
    shrink: bool,
    env: Mapping[str, str] | None,
) -> None:
    """Hypothesis runs of ``chunk`` examples until a failure (shrunk: ``found_so_far`` holds it as found
    while :func:`polish` works), ``max_examples`` or ``time_limit``."""
    k = 0
    while session.examples < max_examples:
        if time_limit is not None and time.monotonic() - began > time_limit:
            break
        budget = min(chunk, max_examples - session.examples)
        config = settings(
            max_examples=budget,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=db,
            report_multiple_bugs=True,
            print_blob=False,
            phases=[Phase.explicit, *([Phase.reuse] if db else []), Phase.generate, Phase.target,
                    *([Phase.shrink] if shrink else [])],
        )
        test = make_test(session, config)
        if seed is not None:
            test = seeded(test, seed + k, db)
        k += 1
        before = session.examples
        try:
            with with_reporter(lambda _msg: None):
                test()
        except TimeUp:
            break
        except (FuzzFailure, BaseExceptionGroup) as exc:
            found = _failures(exc)
            if not found:
                raise
            found_so_far.append(found[0])
            shrunk = polish(session, found[0]) if shrink else found[0]
            _report_failure(report, shrunk, shrunk=shrink, profiler=profiler, clsid=clsid,
                            reproducer=reproducer, env=env, given=given,
                            dictionary=session.dictionary)  # fmt: skip
            break
        if session.examples == before:
            break


def load_reproducer(path: Path) -> dict[str, Any]:
    """A reproducer's fields, checked; a bad one is one :class:`HarnessError` line naming the file and the
    place (line and column, or field).

    Containment (issue 13): a reproducer is played in a fresh work directory, and nothing in it may make
    the replay write or load a file outside it. Its ``commands`` are the example's own: the fake runtime
    protocol's ``start``/``end``/``sync``/``quit``/``ready`` are the harness's (``start`` names the file the
    child truncates and writes), so a command with one of those ops, or a ``trace`` field, is refused.
    An ``env`` value that names a path (it starts with ``/``, ``~``, ``./``, ``../`` or ``{workdir}``)
    must lie under ``{workdir}`` with no ``..`` part. ``profiler`` names the library under test, which the
    user chose and may override on the command line; it may not hold a ``..`` part or a NUL byte
    (``profiler_given``, the path as the user named it, may: it is used only as :func:`replay_target` says).

    ``program`` (the program engine's example, hex; null from the stateful engine) is what the commands
    were decoded from: they must be the commands of its first steps (the fuzzer's step limit is not kept,
    so of any number of them). A replay plays the commands, so commands that do not follow from the
    program (edited, or another example's) are refused, naming the first command that differs; to play
    edited commands, set ``program`` to null."""
    from conformance.core.fsio import read_text_file

    text = read_text_file(path, "reproducer")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}:{exc.lineno}:{exc.colno}: not a reproducer: invalid JSON: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # nesting too deep, a number too long
        raise InputError(f"{path}:1: not a reproducer: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != REPRODUCER_FORMAT:
        raise InputError(f"{path}: format: not a reproducer (format is not {REPRODUCER_FORMAT!r})")
    for key, kind in (("profiler", str), ("clsid", str), ("commands", list)):
        if not isinstance(data.get(key), kind):
            raise InputError(f"{path}: {key}: reproducer field {key!r} is missing or not a {kind.__name__}")
    profiler: str = data["profiler"]
    if not profiler or "\0" in profiler or ".." in Path(profiler).parts:
        raise InputError(f"{path}: profiler: {profiler!r} is not a usable path (empty, a NUL byte or '..')")
    given = data.get("profiler_given", profiler)
    if not isinstance(given, str) or not given or "\0" in given:
        raise InputError(f"{path}: profiler_given: not a path (a non-empty string with no NUL byte)")
    if "\0" in data["clsid"]:
        raise InputError(f"{path}: clsid: holds a NUL byte")
    control = {"start", "end", "sync", "quit", "ready"}
    for i, command in enumerate(data["commands"]):
        if not isinstance(command, dict) or not isinstance(command.get("op"), str):
            raise InputError(f"{path}: commands[{i}]: not an object with a string 'op'")
        if command["op"] in control or "trace" in command:
            raise InputError(
                f"{path}: commands[{i}]: op {command['op']!r} with "
                f"{'a trace field' if 'trace' in command else 'no place in a reproducer'}: the fake runtime "
                "protocol's start/end/sync/quit are the harness's (start names the file the child writes)"
            )
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise InputError(f"{path}: env: reproducer field 'env' is not an object of strings")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise InputError(f"{path}: env[{name!r}]: not a variable name and value ('=' or a NUL byte)")
        if value.startswith(("/", "~", "./", "../", "{workdir}")) or value in (".", ".."):
            rest = value.removeprefix("{workdir}")
            inside = value.startswith("{workdir}") and (not rest or rest.startswith("/"))
            if not inside or ".." in Path(rest).parts:
                raise InputError(
                    f"{path}: env[{name!r}]: {value!r} names a path outside the replay's work directory "
                    "(paths in a reproducer start with {workdir}/ and have no '..' part)"
                )
    raw = data.get("dictionary", {})
    if not isinstance(raw, dict):
        raise InputError(f"{path}: dictionary: not an object (the names the program drew from)")
    dictionary = Dictionary.from_json(raw, f"{path}: dictionary")
    _check_program(path, data.get("program"), data["commands"], dictionary)
    return data


def _command_text(command: Mapping[str, Any]) -> str:
    return " ".join(str(part) for part in (command.get("op"), command.get("name")) if part is not None)


def _check_program(
    path: Path, program: object, commands: list[Any], dictionary: Dictionary | None = None
) -> None:
    """``commands`` are the commands of the first k steps of ``program`` for some k (see
    :func:`load_reproducer`); else one :class:`HarnessError` line."""
    if program is None:
        return
    try:
        data = bytes.fromhex(program) if isinstance(program, str) else None
    except ValueError:
        data = None
    if data is None:
        raise InputError(f"{path}: program: not a hex string of the example's bytes (nor null)")
    # every step sends at least one command: more steps than commands cannot give these commands
    decoded = decode(data, len(commands), world_of(commands), dictionary)
    derived: list[Any] = json.loads(json.dumps(decoded.world.commands))
    if len(commands) in (0, *decoded.ends) and derived[: len(commands)] == commands:
        return
    redo = "edited, or another example's: set program to null to play edited commands"
    differ = next((i for i, (a, b) in enumerate(zip(commands, derived, strict=False)) if a != b), None)
    if differ is not None:
        raise InputError(
            f"{path}: commands[{differ}]: does not follow from the reproducer's program, whose steps give "
            f"{_command_text(derived[differ])!r} there ({redo})"
        )
    ends = ", ".join(str(n) for n in decoded.ends[:8]) + (", ..." if len(decoded.ends) > 8 else "")
    raise InputError(
        f"{path}: commands: {len(commands)} commands do not follow from the reproducer's program, whose "
        f"steps end after {ends or 'no'} commands ({redo})"
    )


def replay_target(path: Path, data: Mapping[str, Any], profiler: Path | None = None) -> Path:
    """The library a reproducer (``data``, read from ``path``) is played against, resolved: ``profiler``
    when the user names one (a bare file name in the current folder too); else its ``profiler`` (the path
    the fuzzer resolved: the same library from whatever folder the replay runs in); else, when that is not
    on this machine, its ``profiler_given`` if that is relative with no ``..`` part, from the current folder
    (a reproducer made elsewhere, replayed in a checkout of the same tree). Else one :class:`InputError`
    line naming both."""
    if profiler is not None:
        return check_profiler(profiler)
    stored = Path(data["profiler"])
    given = Path(data.get("profiler_given", data["profiler"]))
    candidates = [stored]
    if not given.is_absolute() and ".." not in given.parts and given != stored:
        candidates.append(given)
    for candidate in candidates:
        if candidate.exists():
            return check_profiler(candidate)
    named = f"{stored}" + (f" (given as {given})" if given != stored else "")
    raise InputError(f"{path}: profiler: {named} is not on this machine; name the library after the "
                     "reproducer: fuzz --replay FILE PROFILER.so")  # fmt: skip


def replay(path: Path, *, profiler: Path | None = None, hang_s: float = DEFAULT_HANG_S) -> list[Finding]:
    """Play a reproducer again in a fresh fake runtime; the findings it gives now (the library:
    :func:`replay_target`)."""
    data = load_reproducer(path)
    target = replay_target(path, data, profiler)
    commands: list[Mapping[str, Any]] = data["commands"]
    with tempfile.TemporaryDirectory(prefix="profharness-replay-") as tmp, FakeRuntime(
        target, data["clsid"], hang_s=hang_s, env=data.get("env", {}), workdir=Path(tmp)
    ) as runtime:
        trace = Path(tmp) / "trace.jsonl"
        outcome = runtime.run_example(trace, list(commands))
        return judge(trace, outcome, commands)
