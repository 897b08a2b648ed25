"""fuzz-runtime on live runtimes: the CI profile (every shape once on both runtimes) and a planted divergence.

The planted divergence changes one model rule in the test (monkeypatched where the stack adapter calls the
DoStackSnapshot model): the model believes a function that calls itself shows one frame, not two. A round of
the search must find a program the changed model mispredicts and shrink it to a program of a few frames;
the same program judged by the real model does not show that disagreement.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clr_model.stacksnapshot import ManagedFrame, Snapshot, SnapshotInput, ThreadModel
from clr_model.stacksnapshot import snapshot as model_snapshot
from conformance.adapters import stack as stack_adapter
from conformance.core.runtimes import Runtime
from conformance.fuzz_runtime.differential import Differential
from conformance.fuzz_runtime.search import FINDING_FILE, FuzzSettings, fuzz, keep, shrink_round
from conformance.fuzz_runtime.shapes import StackProgram, Step, program_from_dict
from conformance.fuzz_runtime.strategies import known_programs

pytestmark = pytest.mark.live

#: the exception-filter leaf: inside a filter DoStackSnapshot reports the runtime's native dispatch code
#: between the filter funclet and its method's own frame (one FunctionID 0 callback), which StackTrace does
#: not show; the program declares the funclet (``dispatched``), so the model expects that unmanaged run
FILTER_LEAF = StackProgram(now_leaf="filter")


def test_ci_profile_runs_every_known_shape_on_every_runtime(runtimes: list[Runtime], tmp_path: Path) -> None:
    differential = Differential(runtimes, work_dir=tmp_path / "work")
    report = fuzz(differential, FuzzSettings(generate=False, out=tmp_path / "out"))
    programs = known_programs()
    assert report.programs == len(programs)
    assert report.shapes == set().union(*(p.shapes() for p in programs))
    runs_each = {rt.version: report.runs_per_runtime.get(rt.version) for rt in runtimes}
    assert len(set(runs_each.values())) == 1 and report.runs == sum(report.runs_per_runtime.values()), (
        runs_each
    )
    # no run crashed, hung or failed and no judge lacked an input: the generator's programs are sound
    assert not [k.finding.message for k in report.findings if k.finding.status == "error"]
    # each known shape conforms on both runtimes (or diverges as the expectation files say): findings are news
    assert not report.findings, [(k.program.describe(), k.finding.message) for k in report.findings]


def _collapse_self_calls(real: object) -> object:
    """The planted rule: consecutive frames of one function are one frame."""

    def planted(inp: SnapshotInput) -> Snapshot:
        frames: list[object] = []
        for frame in inp.thread.frames:
            previous = frames[-1] if frames else None
            if (
                isinstance(frame, ManagedFrame)
                and isinstance(previous, ManagedFrame)
                and previous.function_id == frame.function_id
            ):
                continue
            frames.append(frame)
        thread = ThreadModel(frames=tuple(frames))
        return real(inp.model_copy(update={"thread": thread}))  # type: ignore[operator,no-any-return]

    return planted


def test_a_finding_is_kept_as_a_ready_scenario_folder(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the planted rule a two-frame recursion diverges; it becomes app.cs, plan.json, finding.json."""
    monkeypatch.setattr(stack_adapter, "snapshot", _collapse_self_calls(model_snapshot))
    differential = Differential([runtimes[-1]], work_dir=tmp_path / "work")
    program = StackProgram(now_chain=(Step("recursion", 2),))
    findings = differential.run(program).findings
    assert findings, "the planted rule did not make the recursion program diverge"
    kept = keep(findings, program, "known", differential, tmp_path / "out")
    folder = kept[0].folder
    assert folder is not None and all(k.folder == folder for k in kept)
    document = json.loads((folder / FINDING_FILE).read_text())
    assert {k.finding.clause for k in kept} == {f["clause"] for f in document["findings"]}
    assert program_from_dict(document["program_spec"]) == program  # the finding names its program
    assert (folder / "app.cs").read_text().startswith("// fuzz-runtime stack program")
    assert json.loads((folder / "plan.json").read_text())["experiments"]


@pytest.mark.long  # minutes of live runs and shrinking: the nightly profile
def test_planted_divergence_is_found_and_shrunk_to_a_few_frames(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    newest = [runtimes[-1]]
    known = Differential(newest, work_dir=tmp_path / "real").run(FILTER_LEAF).findings
    seen = {sig for f in known for sig in f.signatures()}
    monkeypatch.setattr(stack_adapter, "snapshot", _collapse_self_calls(model_snapshot))
    planted = Differential(newest, work_dir=tmp_path / "planted")
    settings = FuzzSettings(families=("stack",), max_examples=40, seed=int(os.environ.get("FUZZ_SEED", "7")),
                            shrink_s=240.0)  # fmt: skip
    found = shrink_round(planted, settings, seen)
    assert found is not None, "the search found no program the planted rule mispredicts"
    finding, program = found
    target = next(sig for sig in sorted(finding.signatures()) if sig not in seen)
    assert isinstance(program, StackProgram)
    assert program.size() <= 4, program.describe()  # e.g. one recursion of 2 frames, or a filter leaf
    monkeypatch.undo()
    real = Differential(newest, work_dir=tmp_path / "real-again").run(program)
    assert not any(target in f.signatures() for f in real.findings), (
        "the shrunk program diverges without the plant"
    )
