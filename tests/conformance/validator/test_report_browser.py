"""The validation's HTML report in headless Chromium (tests/conformance/browser.py): a clean validation and a
faulty one of real fixture profilers on both runtimes, and a synthetic one with a 30,000-occurrence group,
a note and a crashed run. No browser errors; the summary per runtime, the groups (findings before notes)
and their occurrences behind ``<details>`` render; nothing is wider than the window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.core.runtimes import Runtime
from conformance.validator import api, report
from conformance.validator.result import ValidationResult
from tests.conformance import browser
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture
from tests.conformance.validator.test_report import faulty


@pytest.fixture(scope="module")
def chromium() -> Iterator[browser.Chromium]:
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package `chromium`; ./dev setup installs it)")
    with browser.Chromium(timeout_s=15.0) as running:
        yield running


_PAGE = """(() => {
  const rows = sel => Array.from(document.querySelectorAll(sel + ' tr')).slice(1)
    .map(r => Array.from(r.cells).map(c => c.textContent));
  const groups = Array.from(document.querySelectorAll('div.ev')).map(g => ({
    kind: g.classList.contains('note') ? 'note' : 'finding',
    title: g.querySelector('h3').textContent,
    occurrences: g.querySelectorAll('details table.occ tr').length - 1,
    shown: Array.from(g.querySelectorAll('details table.occ tr')).filter(r => r.checkVisibility()).length,
  }));
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id);
  return {
    runtimes: rows('table.runtimes'), runs: rows('table.runs'), clauses: rows('table.clauses'), groups,
    verdict: document.querySelector('p.verdict').textContent,
    banner: !!document.querySelector('p.banner'),
    duplicate_ids: ids.filter((id, i) => ids.indexOf(id) !== i),
    too_wide: document.documentElement.scrollWidth > window.innerWidth,
  };
})()"""

_OPEN_ALL = """(() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  return Array.from(document.querySelectorAll('div.ev')).map(g =>
    Array.from(g.querySelectorAll('details table.occ tr')).filter(r => r.checkVisibility()).length - 1);
})()"""


def _render(chromium: browser.Chromium, result: ValidationResult, page: Path) -> dict[str, Any]:
    page.write_text(report.to_html(result))
    seen = chromium.render(page, evaluate={"page": _PAGE, "opened": _OPEN_ALL})
    assert seen.errors == [], f"browser errors on {seen.url}: {seen.errors}"
    assert seen.screenshot.is_file() and browser.png_size(seen.screenshot)[0] >= 1280
    values: dict[str, Any] = seen.values["page"]
    assert values["duplicate_ids"] == [] and values["too_wide"] is False
    assert all(g["shown"] == 0 for g in values["groups"]), "occurrences are folded until opened"
    values["opened"] = seen.values["opened"]
    return values


@pytest.fixture(scope="module")
def live_results(runtimes: list[Runtime]) -> dict[str, ValidationResult]:
    return {name: api.validate(build_fixture(name), FIXTURE_CLSID, hang_s=5.0)
            for name in ("correct", "crash")}  # fmt: skip


@pytest.mark.live
def test_a_clean_validation_renders(
    tmp_path: Path,
    chromium: browser.Chromium,
    live_results: dict[str, ValidationResult],
    runtimes: list[Runtime],
) -> None:
    result = live_results["correct"]
    seen = _render(chromium, result, tmp_path / "clean.html")
    versions = [rt.version for rt in runtimes]
    n = len(api.rule_ids())
    assert [row[:4] for row in seen["runtimes"]] == [[v, "1", "ok", "0"] for v in versions]
    for row in seen["runtimes"]:  # what the runs never showed a rule is skipped, however clean
        failed, noted, passed, skipped = (int(x) for x in row[4:])
        assert (failed, noted) == (0, 0) and passed > 0 and passed + skipped == n
    assert [row[:3] for row in seen["runs"]] == [[v, "basic", "ok"] for v in versions]
    assert seen["groups"] == [] and seen["verdict"].startswith("0 finding group(s)")
    assert len(seen["clauses"]) == n and all(set(row[2:]) <= {"passed", "skipped"} for row in seen["clauses"])


@pytest.mark.live
def test_a_faulty_validation_renders(
    tmp_path: Path,
    chromium: browser.Chromium,
    live_results: dict[str, ValidationResult],
    runtimes: list[Runtime],
) -> None:
    result = live_results["crash"]
    seen = _render(chromium, result, tmp_path / "crash.html")
    n = len(api.rule_ids())
    assert [row[2] for row in seen["runtimes"]] == ["crashed"] * len(runtimes)
    assert [row[3] for row in seen["runtimes"]] == ["SIGSEGV"] * len(runtimes)
    for row in seen["runtimes"]:  # VAL-CRASH failed; what the run reached before the crash passed, the rest
        failed, noted, passed, skipped = (int(x) for x in row[4:])  # is skipped
        assert (failed, noted) == (1, 0) and skipped > 0 and passed + skipped == n - 1
    (group,) = seen["groups"]
    assert group["kind"] == "finding" and "VAL-CRASH" in group["title"]
    assert group["occurrences"] == len(runtimes) and seen["opened"] == [len(runtimes)]
    crash = next(row for row in seen["clauses"] if row[0] == "VAL-CRASH")
    assert crash[1] == "the profiler crashed the process" and crash[2:] == ["failed"] * len(runtimes)
    assert all(set(row[2:]) <= {"passed", "skipped"} for row in seen["clauses"] if row[0] != "VAL-CRASH")


@pytest.mark.live
def test_a_large_group_a_note_and_an_interrupted_validation_render(
    tmp_path: Path, chromium: browser.Chromium
) -> None:
    result = faulty().model_copy(update={"interrupted": True})
    seen = _render(chromium, result, tmp_path / "faulty.html")
    assert seen["banner"] is True
    assert [g["kind"] for g in seen["groups"]] == ["finding", "finding", "note"]
    assert "\u00d730000 on 3.1.23" in seen["groups"][0]["title"]
    assert [g["occurrences"] for g in seen["groups"]] == [20, 1, 1] and seen["opened"] == [20, 1, 1]
    assert [row[:4] for row in seen["runtimes"]] == [
        ["3.1.23", "1", "ok", "0"], ["8.0.4", "1", "crashed", "SIGSEGV"]]  # fmt: skip
