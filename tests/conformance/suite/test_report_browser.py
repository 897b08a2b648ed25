"""The HTML report in a real headless Chromium: no console errors, the matrix and the frame pictures render.

The browser is Debian's ``chromium`` driven over the DevTools protocol (tests/conformance/browser.py). Its
absence skips these tests, which CI (``PROFHARNESS_REQUIRE_LIVE=1``; ./dev installs chromium) turns into a
failure. Each test leaves a screenshot next to the page it rendered (under pytest's tmp_path).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.core.errors import HarnessError
from conformance.suite import report
from conformance.suite.verdicts import Status, SuiteResult, Verdict, VerdictOutcome
from tests.conformance import browser
from tests.conformance.suite.test_report import sample

#: a realistic walk: runtime frames with long, fully qualified names, one run of native frames
_WALK = (
    "App.Scenarios.StackWalks.DeepRecursion::Level3(System.Int32, "
    "System.Collections.Generic.List`1<System.String>)",
    "App.Scenarios.StackWalks.DeepRecursion::Level2(System.Int32)",
    "App.Scenarios.StackWalks.DeepRecursion::Level1(System.Int32)",
    "[native frames: funcId 0]",
    "System.Linq.Enumerable+SelectManySingleSelectorIterator`2[[System.Collections.Generic.KeyValuePair`2"
    "[[System.String],[System.Collections.Generic.List`1[[App.Scenarios.Payload]]]]],"
    "[App.Scenarios.Payload]]::MoveNext()",
    "System.Private.CoreLib!System.Threading.ExecutionContext::RunInternal("
    "ExecutionContext, ContextCallback, Object)",
    "App.Program::Main(System.String[])",
)


def realistic() -> SuiteResult:
    """test_report.sample() (conforming, expected divergence with picture and evidence, unexpected, error)
    plus a not-applicable verdict and an unexpected divergence with a long walk picture."""
    result = sample()
    base = result.verdicts[0]
    extra = [
        base.model_copy(
            update={
                "clause": "DSS-05",
                "status": Status.DIVERGES,
                "outcome": VerdictOutcome.UNEXPECTED,
                "observed": "frame 3 has no context although REGISTER_CONTEXT was asked",
                "expected": "a context on every frame",
                "picture": [{"label": label, "ok": i != 3} for i, label in enumerate(_WALK)],
                "evidence": [
                    {
                        "seq": 40 + i,
                        "kind": "frame",
                        "walk": 2,
                        "index": i,
                        "funcId": 0 if i == 3 else 0x7F00 + i,
                    }
                    for i in range(len(_WALK))
                ],
                "outcome_message": "DSS-05[8.0.4]: diverges and no expectation explains it",
                "runtime": "8.0.4",
            }
        ),
        base.model_copy(
            update={
                "clause": "DSS-05",
                "runtime": "3.1.23",
                "status": Status.CONFORMS,
                "outcome": VerdictOutcome.AS_DOCUMENTED,
            }
        ),
        base.model_copy(
            update={
                "clause": "MR2-08",
                "runtime": "3.1.23",
                "status": Status.NOT_APPLICABLE,
                "outcome": VerdictOutcome.AS_DOCUMENTED,
                "observed": "no compacting GC happened",
            }
        ),
    ]
    verdicts: list[Verdict] = [*result.verdicts, *extra]
    return result.model_copy(update={"verdicts": verdicts})


@pytest.fixture(scope="module")
def chromium() -> Iterator[browser.Chromium]:
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package `chromium`; ./dev setup installs it)")
    with browser.Chromium(timeout_s=15.0) as running:
        yield running


_MATRIX_ROWS = """Array.from(document.querySelectorAll('table.matrix tr')).slice(1)
  .map(r => Array.from(r.cells).map(c => c.textContent))"""

# every picture: its frame boxes and labels, and whether each label fits inside its box as laid out
_PICTURES = """Array.from(document.querySelectorAll('svg')).map(svg => {
  const box = svg.getBoundingClientRect();
  const rects = Array.from(svg.querySelectorAll('rect'));
  const labels = Array.from(svg.querySelectorAll('text')).slice(1);
  return {
    tooltips: Array.from(svg.querySelectorAll('g > title')).map(t => t.textContent),
    width: box.width, height: box.height,
    frames: rects.length,
    labels: labels.map(t => t.textContent),
    overflowing: labels.filter((t, i) => {
      const r = rects[i].getBBox(), b = t.getBBox();
      return b.x < r.x || b.x + b.width > r.x + r.width || b.y < r.y || b.y + b.height > r.y + r.height;
    }).map(t => t.textContent),
  };
})"""

_PAGE_WIDER_THAN_WINDOW = "document.documentElement.scrollWidth > window.innerWidth"

# in-page links whose target is missing, and ids used more than once
_BROKEN_ANCHORS = """(() => {
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id);
  return {
    dangling: Array.from(document.querySelectorAll("a[href^='#']"))
      .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id)),
    duplicate: ids.filter((id, i) => ids.indexOf(id) !== i),
    links: document.querySelectorAll("a[href^='#']").length,
  };
})()"""


@pytest.mark.live
def test_html_report_renders_in_chromium_without_errors(tmp_path: Path, chromium: browser.Chromium) -> None:
    result = realistic()
    page = tmp_path / "report.html"
    report.write_html(result, page)

    seen = chromium.render(
        page,
        evaluate={
            "rows": _MATRIX_ROWS,
            "pictures": _PICTURES,
            "too_wide": _PAGE_WIDER_THAN_WINDOW,
            "anchors": _BROKEN_ANCHORS,
        },
    )

    assert seen.errors == [], f"browser errors on {seen.url}: {seen.errors}"
    assert seen.screenshot == tmp_path / "report.png" and seen.screenshot.is_file()
    assert seen.screenshot.stat().st_size > 5_000
    width, height = browser.png_size(seen.screenshot)
    assert width >= 1280 and height >= 900

    clauses = sorted({v.clause for v in result.verdicts})
    rows = seen.values["rows"]
    assert [row[0] for row in rows] == clauses
    assert all(len(row) == 2 + len(result.runtimes) for row in rows)
    by_clause = {row[0]: row for row in rows}
    assert by_clause["DSS-02"][2:] == ["diverges*", "DIVERGES !"]
    assert by_clause["MR2-08"][2:] == ["n/a", "ERROR"]
    assert seen.values["too_wide"] is False
    anchors = seen.values["anchors"]
    assert anchors["dangling"] == [] and anchors["duplicate"] == [] and anchors["links"] > 0

    pictures = seen.values["pictures"]
    pictured = [v for v in result.verdicts if v.picture]
    assert len(pictures) == len(pictured) == 2
    for drawn, verdict in zip(pictures, pictured, strict=True):
        assert drawn["frames"] == len(verdict.picture)
        assert drawn["width"] > 100 and drawn["height"] > 20 * len(verdict.picture)
        full = [f"{i}: {p['label']}" for i, p in enumerate(verdict.picture)]
        assert drawn["tooltips"] == full
        for label, whole in zip(drawn["labels"], full, strict=True):
            assert label == whole or (label.endswith("\u2026") and whole.startswith(label[:-1]))
        assert drawn["overflowing"] == []


@pytest.mark.live
@pytest.mark.parametrize(
    ("body", "shows"),
    [
        ("<script>console.error('x')</script>", "console.error: x"),
        ("<script>setTimeout(() => { throw new Error('boom') }, 0)</script>", "Error: boom"),
        ("<img src='missing.png' alt=''>", "missing.png"),
    ],
    ids=["console-error", "uncaught-exception", "missing-resource"],
)
def test_a_broken_page_is_reported(tmp_path: Path, chromium: browser.Chromium, body: str, shows: str) -> None:
    page = tmp_path / "broken.html"
    page.write_text(f"<!doctype html><html lang='en'><head><title>t</title></head><body>{body}</body></html>")
    seen = chromium.render(page)
    assert len(seen.errors) == 1 and shows in seen.errors[0], seen.errors
    assert browser.png_size(seen.screenshot)[0] >= 1280


def test_png_size_rejects_a_non_png(tmp_path: Path) -> None:
    fake = tmp_path / "x.png"
    fake.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(HarnessError, match=r"x\.png: not a PNG file"):
        browser.png_size(fake)


@pytest.mark.live
def test_an_empty_report_renders_and_says_nothing_was_judged(
    tmp_path: Path, chromium: browser.Chromium
) -> None:
    empty = sample().model_copy(update={"verdicts": []})
    page = tmp_path / "empty.html"
    report.write_html(empty, page)
    seen = chromium.render(page, evaluate={"text": "document.body.innerText"})
    assert seen.errors == []
    assert "no clause was judged" in seen.values["text"] and "every judged clause" not in seen.values["text"]


@pytest.mark.live
def test_a_missing_page_is_one_line(tmp_path: Path, chromium: browser.Chromium) -> None:
    with pytest.raises(HarnessError, match=r"nope\.html: no such page to render"):
        chromium.render(tmp_path / "nope.html")


def test_a_browser_that_dies_at_start_is_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(HarnessError, match=r"chromium exited with code 3 .*: cannot open display"):
        browser.Chromium(str(fake)).__enter__()


def test_a_browser_that_hangs_at_start_times_out_and_is_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = tmp_path / "chromium"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(HarnessError, match=r"timed out waiting for .*DevToolsActivePort"):
        with browser.Chromium(str(fake), timeout_s=0.5):
            pass
    assert time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists(), "the hanging browser was left running"
