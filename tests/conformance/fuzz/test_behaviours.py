"""Issue 22: the fake runtime's behaviour table (conformance/fuzz/behaviours.py, docs/fake-runtime.md) is
complete: whatever the world generator or the native fake runtime does has a row, every row is used, the
observed world makes no choice only a document allows, and every quote stands in its page."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from clr_model.catalog.base import SOURCES, Document
from clr_model.clauses import CATALOG
from conformance.fuzz.behaviours import BEHAVIOURS, WORLDS, Basis, allowed, behaviour, render_table
from conformance.fuzz.program import decode
from conformance.fuzz.world import World, world_of

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "fake-runtime.md"
SPEC = ROOT.parent / "shared" / "spec"  # ../shared beside the clone
NATIVE = [ROOT / "conformance" / "native" / "fakeruntime" / n for n in ("fakeruntime.cpp", "generated.h")]
GENERATOR = [ROOT / "conformance" / "fuzz" / name for name in ("world.py", "program.py")]
IDS = {b.id for b in BEHAVIOURS}
#: the Microsoft pages the clause catalog quotes, not in ../shared/spec (a behaviour resting on one of them
#: quotes a clause's sentence)
CATALOG_PAGES = {d.value for d in Document if SOURCES[d].startswith("https://learn.microsoft.com/")}


def native_tags() -> set[str]:
    tags: set[str] = set()
    for path in NATIVE:
        for found in re.findall(r"behaviour: ([a-z0-9.\-]+(?:, [a-z0-9.\-]+)*)", path.read_text()):
            tags |= set(found.split(", "))
    return tags


def generator_tags() -> set[str]:
    text = "".join(p.read_text() for p in GENERATOR)
    return set(re.findall(r'\b(?:does|may|allowed)\("([^"]+)"', text))


def random_examples(world: str, count: int, seed: int = 22) -> list[World]:
    rng = random.Random(seed)
    return [decode(rng.randbytes(240), 30, world).world for _ in range(count)]


def test_the_page_holds_the_table() -> None:
    text = DOC.read_text()
    assert "## The table\n\n" in text
    assert text.split("## The table\n\n", 1)[1] == render_table(), (
        "docs/fake-runtime.md's table differs from conformance/fuzz/behaviours.py: paste render_table()"
    )


def test_everything_the_fake_runtime_does_has_a_row_and_every_row_is_done() -> None:
    done = native_tags() | generator_tags()
    assert done <= IDS, f"behaviours with no row: {sorted(done - IDS)}"
    assert IDS <= done, f"rows nothing does: {sorted(IDS - done)}"


def test_every_native_answer_names_its_behaviours() -> None:
    lines = NATIVE[0].read_text().splitlines()
    answer = re.compile(r"HRESULT (InfoBase|MetaDataBase)::answer_\w+\(")
    untagged = [ln for k, ln in enumerate(lines) if answer.match(ln) and "behaviour:" not in lines[k - 1]]
    assert untagged == []


@pytest.mark.parametrize("world", WORLDS)
def test_generated_examples_do_only_rows_of_their_world(world: str) -> None:
    examples = random_examples(world, 400)
    used = set().union(*(w.used for w in examples))
    assert all(allowed(b, world) for b in used)
    if world == "observed":
        assert all(behaviour(b).basis is not Basis.DOCUMENTED for b in used)
    # the GC layouts a real runtime shows (issue 22) are reached in either world
    assert {"gc.compact", "gc.reuse", "gc.delta0", "gc.order", "gc.batch-512", "exception.caught"} <= used
    assert all(world_of(w.commands) == world for w in examples)


def test_the_documented_world_reaches_what_only_documents_allow() -> None:
    used = set().union(*(w.used for w in random_examples("documented", 400)))
    documented = {b.id for b in BEHAVIOURS if b.basis is Basis.DOCUMENTED}
    assert {"names.grow", "names.unicode", "alloc.huge", "gc.batch-small"} <= used & documented


def test_a_world_refuses_a_behaviour_it_has_not() -> None:
    with pytest.raises(ValueError, match=r"names\.grow"):
        World(world="observed").does("names.grow")
    with pytest.raises(KeyError):
        World(world="documented").does("no.such-behaviour")
    with pytest.raises(ValueError, match="world"):
        World(world="imagined")


def test_names_do_not_change_between_two_questions_in_the_observed_world() -> None:
    """The false positive of issue 22 (BUF-08 on a correct double-pass client): a name the fake runtime
    answers is the same on the size query and the fill unless the documented world is asked for."""
    for world in random_examples("observed", 300):
        for cmd in world.commands:
            if cmd["op"] in ("module", "class", "function"):
                assert len(cmd["names"]) == 1 and cmd["names"][0].isascii()


@pytest.mark.parametrize("row", BEHAVIOURS, ids=lambda b: b.id)
def test_a_row_names_what_it_rests_on(row: object) -> None:
    assert isinstance(row, type(BEHAVIOURS[0]))
    if row.basis is Basis.DOCUMENTED:
        assert row.doc and row.quote, "a documented behaviour quotes its sentence"
    else:
        assert row.observed, "an observed behaviour (or a limitation) says what shows it"
    if row.quote and row.doc in CATALOG_PAGES:  # a page the catalog quotes (the ReJIT pages)
        quoted = [c.quote for c in CATALOG.values() if c.document.value == row.doc]
        assert any(_normalise(row.quote) in _normalise(q) for q in quoted), (row.id, row.doc)
        return
    if row.quote:
        page = SPEC / row.doc
        if not page.exists():
            pytest.skip(f"{page} not available")
        assert _normalise(row.quote) in _normalise(page.read_text())


def _normalise(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("\\[", "[")
    return re.sub(r"\s+", " ", text).strip()
