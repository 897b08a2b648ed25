"""Verdicts measured against expectation entries: what makes the suite fail, and the message it gives.

Findings 1 and 3 of issue 7: a not-applicable verdict never passes silently (it fails unless an entry says
``not-applicable``; a listed divergence that comes back n/a fails), and an entry pins every disagreement
(a new line is unexpected, a vanished one is stale), each message naming the clause and the runtime.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.core.errors import HarnessError
from conformance.suite.expectations import Expectation, classify, load_expectations
from conformance.suite.orchestrate import apply_expectations, disagreements_of
from conformance.suite.verdicts import Judgement, Status, Verdict, VerdictOutcome

WHY = "The runtime checks contextSize against its own CONTEXT size."
LINE_A = "now-size-small: DoStackSnapshot returned E_INVALIDARG, expected S_OK"
LINE_B = "now-size-zero: DoStackSnapshot returned E_INVALIDARG, expected S_OK"
LINE_NEW = "now-size-larger: DoStackSnapshot returned E_FAIL, expected S_OK"


def verdict(status: Status, *lines: str, observed: str = "hr=0x80070057") -> Verdict:
    return Verdict(
        clause="DSS-12",
        runtime="8.0.4",
        experiment="stack-walks",
        status=status,
        observed=observed,
        expected="S_OK",
        disagreements=list(lines),
    )


def entry(
    *status: Status, lines: tuple[str, ...] = (), runtimes: tuple[str, ...] = ("8.0.4",)
) -> Expectation:
    return Expectation(
        clause="DSS-12",
        runtimes=runtimes,
        status=status,
        why=WHY,
        disagreements=lines,
        file=Path("8.0.4.toml"),
        line=7,
    )


def test_conforming_without_expectation_is_as_documented() -> None:
    assert classify(verdict(Status.CONFORMS), None)[0] is VerdictOutcome.AS_DOCUMENTED


def test_divergence_without_expectation_is_unexpected_and_names_clause_and_lines() -> None:
    outcome, message = classify(verdict(Status.DIVERGES, LINE_A, LINE_B), None)
    assert outcome is VerdictOutcome.UNEXPECTED
    assert message.startswith("DSS-12[8.0.4]: diverges and no expectation explains it")
    assert LINE_A in message and LINE_B in message


# --- finding 1: not-applicable never passes silently ------------------------------------------------------


def test_finding1_not_applicable_without_entry_is_unexpected_naming_clause_and_runtime() -> None:
    outcome, message = classify(verdict(Status.NOT_APPLICABLE, observed="no buffer_probe call"), None)
    assert outcome is VerdictOutcome.UNEXPECTED
    assert message.startswith("DSS-12[8.0.4]: not applicable")
    assert "stack-walks declares the clause applies" in message and "no buffer_probe call" in message


def test_finding1_listed_divergence_that_comes_back_not_applicable_fails() -> None:
    outcome, message = classify(
        verdict(Status.NOT_APPLICABLE, observed="the hooks were not installed"),
        entry(Status.DIVERGES, lines=(LINE_A,)),
    )
    assert outcome is VerdictOutcome.UNEXPECTED
    assert message.startswith("DSS-12[8.0.4]: not applicable, but the expectation entry 8.0.4.toml:7")
    assert "must be exercised" in message


def test_finding1_not_applicable_passes_only_where_an_entry_says_so() -> None:
    outcome, message = classify(verdict(Status.NOT_APPLICABLE), entry(Status.NOT_APPLICABLE))
    assert outcome is VerdictOutcome.AS_DOCUMENTED and WHY in message
    # an entry that allows n/a as one of the outcomes (a run that cannot always exercise the clause)
    either = entry(Status.DIVERGES, Status.NOT_APPLICABLE, lines=(LINE_A,))
    assert classify(verdict(Status.NOT_APPLICABLE), either)[0] is VerdictOutcome.AS_DOCUMENTED
    assert classify(verdict(Status.DIVERGES, LINE_A), either)[0] is VerdictOutcome.EXPECTED_DIVERGENCE


def test_finding1_not_applicable_entry_that_now_conforms_is_stale() -> None:
    outcome, message = classify(verdict(Status.CONFORMS), entry(Status.NOT_APPLICABLE))
    assert outcome is VerdictOutcome.STALE_EXPECTATION and "DSS-12[8.0.4]" in message


def test_finding1_suite_fails_on_a_not_applicable_verdict_of_a_registered_judge() -> None:
    from conformance.suite.expectations import ExpectationSet
    from conformance.suite.verdicts import SuiteResult

    verdicts = apply_expectations(
        [verdict(Status.NOT_APPLICABLE, observed="no walk")], ["8.0.4"], ExpectationSet((), Path("."))
    )
    result = SuiteResult(runtimes=["8.0.4"], runtime_sources={}, verdicts=verdicts, seconds=0, runs=[])
    assert not result.ok
    assert result.failures[0].outcome_message.startswith("DSS-12[8.0.4]: not applicable")


# --- finding 3: every disagreement is pinned --------------------------------------------------------------


def test_finding3_expected_divergence_with_exactly_the_listed_lines() -> None:
    known = entry(Status.DIVERGES, lines=(LINE_A, LINE_B))
    outcome, _ = classify(verdict(Status.DIVERGES, LINE_B, LINE_A), known)
    assert outcome is VerdictOutcome.EXPECTED_DIVERGENCE


def test_finding3_a_new_disagreement_in_a_clause_with_a_known_divergence_fails_naming_it() -> None:
    known = entry(Status.DIVERGES, lines=(LINE_A, LINE_B))
    outcome, message = classify(verdict(Status.DIVERGES, LINE_A, LINE_B, LINE_NEW), known)
    assert outcome is VerdictOutcome.UNEXPECTED
    assert message.startswith(
        "DSS-12[8.0.4]: new disagreement(s) not listed in the expectation entry 8.0.4.toml:7"
    )
    assert LINE_NEW in message and LINE_A not in message


def test_finding3_a_vanished_disagreement_is_stale_naming_it() -> None:
    known = entry(Status.DIVERGES, lines=(LINE_A, LINE_B))
    outcome, message = classify(verdict(Status.DIVERGES, LINE_A), known)
    assert outcome is VerdictOutcome.STALE_EXPECTATION
    assert message.startswith("DSS-12[8.0.4]: listed disagreement(s)") and LINE_B in message


def test_finding3_divergence_that_no_longer_occurs_is_stale() -> None:
    outcome, message = classify(verdict(Status.CONFORMS), entry(Status.DIVERGES, lines=(LINE_A,)))
    assert outcome is VerdictOutcome.STALE_EXPECTATION
    assert "DSS-12[8.0.4]" in message and "no longer occurs" in message


def test_finding3_a_divergence_without_the_judges_lines_uses_its_observed_line() -> None:
    judgement = Judgement(status=Status.DIVERGES, observed="walk has 6 callbacks, 9 expected", expected="9")
    assert disagreements_of(judgement) == ["walk has 6 callbacks, 9 expected"]
    given = Judgement(
        status=Status.DIVERGES, observed="2 problems", expected="-", disagreements=("a", "b", "a")
    )
    assert disagreements_of(given) == ["a", "b"]
    assert disagreements_of(Judgement(status=Status.CONFORMS, observed="ok", expected="ok")) == []
    # the transition's observed line is pinned without its per-run values (addresses, thread ids)
    masked = Judgement(
        status=Status.DIVERGES, observed="ip 0x7fe1dffd4c14: 0x80004005 E_FAIL, thread 17278", expected=""
    )
    assert disagreements_of(masked) == ["ip 0xADDR: 0x80004005 E_FAIL, thread N"]


def test_error_is_always_a_failure() -> None:
    assert classify(verdict(Status.ERROR, observed="crashed (SIGSEGV)"), None)[0] is VerdictOutcome.ERROR


# --- the files --------------------------------------------------------------------------------------------

ENTRY = 'runtimes = ["{rt}"]\nstatus = "diverges"\ndisagreements = ["x: 1 != 2"]\nwhy = "{why}"\n'


def test_an_entry_covers_several_runtimes_and_version_prefixes(tmp_path: Path) -> None:
    (tmp_path / "common.toml").write_text(
        '[DSS-12]\nruntimes = ["3.1.23", "8.0"]\nstatus = "diverges"\ndisagreements = ["x: 1 != 2"]\n'
        f'why = "{WHY}"\n'
    )
    found = load_expectations(tmp_path)
    assert set(found.for_runtime("3.1.23")) == {"DSS-12"}
    assert set(found.for_runtime("8.0.4")) == {"DSS-12"}
    assert found.for_runtime("8.01.0") == {} and found.for_runtime("3.1.2") == {}
    assert found.for_runtime("8.0.4")["DSS-12"].source == "common.toml:1"


def test_a_duplicate_entry_is_one_line_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "common.toml").write_text("# shared\n[DSS-12]\n" + ENTRY.format(rt="8.0", why=WHY))
    (tmp_path / "8.0.4.toml").write_text("[DSS-12]\n" + ENTRY.format(rt="8.0.4", why=WHY))
    with pytest.raises(HarnessError) as info:
        load_expectations(tmp_path)
    message = info.value.message
    assert "\n" not in message and "[DSS-12] runtime" in message
    assert "8.0.4.toml:1" in message and "common.toml:2" in message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('runtimes = ["8.0.4"]\nstatus = "sideways"\nwhy = "long enough reason"\n', "[DSS-12] status"),
        ("[DSS-12\n", "not valid TOML"),
        ('runtimes = ["8.0.4"]\nstatus = "diverges"\nwhy = "long enough reason"\n', "every disagreement"),
        (
            'runtimes = ["8.0.4"]\nstatus = "diverges"\nobserved = "0x8"\nwhy = "long enough reason"\n',
            "old form",
        ),
        (ENTRY.format(rt="8.0.4", why="WRITE-ME: why does 8.0.4 differ?"), "placeholder"),
        (ENTRY.format(rt="8.x", why=WHY), "not a version"),
        ('runtimes = ["8.0.4"]\nstatus = "conforms"\nwhy = "long enough reason"\n', "says nothing"),
    ],
)
def test_expectation_file_errors_name_file_and_clause(tmp_path: Path, body: str, needle: str) -> None:
    text = body if body.startswith("[") else "[DSS-12]\n" + body
    (tmp_path / "8.0.4.toml").write_text(text)
    with pytest.raises(HarnessError) as info:
        load_expectations(tmp_path)
    assert "8.0.4.toml" in info.value.message and needle in info.value.message
    assert "\n" not in info.value.message


def test_no_folder_means_no_entries(tmp_path: Path) -> None:
    assert load_expectations(tmp_path / "none").entries == ()


def test_shipped_expectation_files_parse_explain_and_pin_every_entry() -> None:
    from conformance.core.paths import EXPECTATIONS_DIR

    found = load_expectations(EXPECTATIONS_DIR)
    assert found.entries
    for item in found.entries:
        assert len(item.why.split()) >= 5, f"{item.source} [{item.clause}] needs a real explanation"
        if Status.DIVERGES in item.status:
            assert item.disagreements, f"{item.source} [{item.clause}]"
    for path in sorted(EXPECTATIONS_DIR.glob("*.toml")):
        assert path.read_text().startswith("#"), f"{path.name}: say at the top what the file holds"
        assert "observed =" not in path.read_text(), f"{path.name} still uses the old 'observed' form"


# --- the columns of the emulator's layer -------------------------------------------------------------------


def test_an_entry_names_an_emu_column_by_layer_and_version_or_by_name(tmp_path: Path) -> None:
    """``runtimes`` names matrix columns: "emu 8.0.4" (or the prefix "emu 8.0") is the emulator's column of
    8.0.4, "emu x86 hooks" the hook checker's; a version alone is the live column only, and a live and an
    emu entry of one clause and version do not clash."""
    (tmp_path / "common.toml").write_text(
        "# shared\n[DSS-16]\n" + ENTRY.format(rt="8.0", why=WHY) + "\n[FE2-08]\n"
        + ENTRY.format(rt="emu x86 hooks", why=WHY)
    )  # fmt: skip
    (tmp_path / "emu-8.0.4.toml").write_text("# emu\n[DSS-16]\n" + ENTRY.format(rt="emu 8.0", why=WHY))
    found = load_expectations(tmp_path)
    assert found.for_runtime("emu 8.0.4")["DSS-16"].source == "emu-8.0.4.toml:2"
    assert found.for_runtime("8.0.4")["DSS-16"].source == "common.toml:2"
    assert found.for_runtime("emu 3.1.23") == {} and found.for_runtime("3.1.23") == {}
    assert set(found.for_runtime("emu x86 hooks")) == {"FE2-08"}
    assert found.for_runtime("emu x86 hookcheck") == {} and found.for_runtime("x86 hooks") == {}


def test_an_emu_entry_decides_the_emu_columns_verdict_DSS_16(tmp_path: Path) -> None:
    line = "managed: the live walk's managed frames are not the replay's, leaf first and main last"
    (tmp_path / "emu-8.0.4.toml").write_text(
        f'# emu\n[DSS-16]\nruntimes = ["emu 8.0.4"]\nstatus = "diverges"\ndisagreements = ["{line}"]\n'
        f'why = "{WHY}"\n'
    )
    emu = Verdict(clause="DSS-16", runtime="emu 8.0.4", experiment="emu-captures", status=Status.DIVERGES,
                  observed=line, expected="-", disagreements=[line])  # fmt: skip
    live = emu.model_copy(update={"runtime": "8.0.4"})
    judged = apply_expectations([emu, live], ["8.0.4", "emu 8.0.4"], load_expectations(tmp_path))
    outcomes = {v.runtime: v.outcome for v in judged}
    assert outcomes == {"emu 8.0.4": VerdictOutcome.EXPECTED_DIVERGENCE, "8.0.4": VerdictOutcome.UNEXPECTED}
    assert next(v for v in judged if v.runtime == "emu 8.0.4").expectation is not None


def test_emu_entries_of_one_column_clash_and_a_bad_column_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "common.toml").write_text("# shared\n[DSS-16]\n" + ENTRY.format(rt="emu 8.0", why=WHY))
    (tmp_path / "emu-8.0.4.toml").write_text("[DSS-16]\n" + ENTRY.format(rt="emu 8.0.4", why=WHY))
    with pytest.raises(HarnessError, match=r"^\[DSS-16\] runtime emu 8.0.4 / emu 8.0 has two expectation"):
        load_expectations(tmp_path)
    (tmp_path / "emu-8.0.4.toml").unlink()
    for bad in ("emu", "emu ", "gpu 8.0.4", "emu 8.x hooks!", "EMU 8.0.4"):
        (tmp_path / "common.toml").write_text("# shared\n[DSS-16]\n" + ENTRY.format(rt=bad, why=WHY))
        with pytest.raises(HarnessError) as info:
            load_expectations(tmp_path)
        message = info.value.message
        assert message.startswith(f"{tmp_path / 'common.toml'}:2: [DSS-16] runtimes: ")
        assert "\n" not in message
        assert message.endswith(f"{bad!r} is not a version or version prefix (like 8.0.4 or 8.0), nor a "
                                "column of a layer (emu) like 'emu 8.0.4' or 'emu x86 hooks'")  # fmt: skip


def test_an_interrupted_suite_names_no_stale_entry_and_is_never_ok() -> None:
    """SIGINT/SIGTERM stopped the suite (issue 19): an entry whose experiment never ran is not stale, and the
    result of the runs judged before is not ok, however clean."""
    from conformance.suite.expectations import ExpectationSet
    from conformance.suite.verdicts import SuiteResult

    pending = ExpectationSet((entry(Status.DIVERGES, lines=(LINE_A,)),), Path("."))
    whole = apply_expectations([], ["8.0.4"], pending)
    assert [v.outcome for v in whole] == [VerdictOutcome.STALE_EXPECTATION]
    assert apply_expectations([], ["8.0.4"], pending, stale=False) == []
    cut = SuiteResult(runtimes=["8.0.4"], runtime_sources={}, verdicts=[], seconds=0, runs=[],
                      interrupted=True)  # fmt: skip
    assert cut.failures == [] and not cut.ok
