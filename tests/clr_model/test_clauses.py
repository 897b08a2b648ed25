"""The clause catalog: well-formed, unique, complete per document."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from clr_model.catalog import load
from clr_model.catalog.base import PREFIXES, Clause, Document, Kind, Layer
from clr_model.clauses import CATALOG, UnknownClause, _assemble, clause, with_layer
from clr_model.errors import ModelError

DESIGN_DSS_IDS = [f"DSS-{n:02d}" for n in range(1, 28)]


def test_ids_are_unique_well_formed_and_sorted() -> None:
    ids = list(CATALOG)
    assert ids == sorted(ids)
    assert len(ids) == len(set(ids))
    for cid, item in CATALOG.items():
        assert cid == item.id
        documents = "|".join(p for p in PREFIXES.values() if p not in ("VAL", "IL"))
        assert re.fullmatch(rf"({documents})-\d{{2}}|(VAL|IL)-[A-Z][A-Z-]*[A-Z]", cid)
        assert cid.startswith(PREFIXES[item.document] + "-")


def test_dss_ids_are_contiguous_and_keep_the_design_list() -> None:
    dss_ids = [c.id for c in load("dss")]
    assert dss_ids[: len(DESIGN_DSS_IDS)] == DESIGN_DSS_IDS
    numbers = [int(i.split("-")[1]) for i in dss_ids]
    assert numbers == list(range(1, len(numbers) + 1))


def test_every_document_has_clauses() -> None:
    documents = {c.document for c in CATALOG.values()}
    assert documents == set(Document)


def test_every_ambiguity_has_a_question_and_nothing_else_does() -> None:
    for item in CATALOG.values():
        assert (item.kind is Kind.AMBIGUITY) == (item.question is not None), item.id


def test_dss_ambiguities_the_model_decides_carry_a_model_choice() -> None:
    for item in load("dss"):
        if item.kind is Kind.AMBIGUITY and Layer.MODEL in item.layers:
            assert item.model_choice, item.id


def test_dss_sentences_are_quoted_except_silences() -> None:
    silent = {"DSS-26", "DSS-27"}  # the page says nothing: no sentence to quote
    for item in load("dss"):
        assert bool(item.quote) == (item.id not in silent), item.id


def test_dss_quotes_are_from_the_document() -> None:
    from pathlib import Path

    text = Path(__file__).resolve().parents[3] / "shared" / "spec" / "DoStackSnapshot.md"
    if not text.exists():
        pytest.skip("contract documents not available")
    page = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.read_text())  # drop link targets
    page = " ".join(page.split())
    for item in load("dss"):
        if item.quote:
            quote = " ".join(item.quote.split())
            assert quote.replace("`", "") in page.replace("`", ""), item.id


#: author rules no layer holds a profiler to yet, and why (every other author rule has a validator, hook or
#: fuzz rule: the catalog's layers are held equal to the registry in tests/conformance/suite/test_registry.py)
UNCHECKED_AUTHOR_RULES: dict[str, str] = {
    "BUF-06": "a procedure the page describes (single pass); BUF-04 and BUF-08 check what breaking it shows",
    "BUF-07": "a procedure the page describes (double pass); BUF-04 and BUF-08 check what breaking it shows",
    "DSS-09": "needs the target thread's state at an asynchronous walk (issue 24's walk quality)",
    "DSS-24": "needs the profiler's lock operations, which the recording proxy cannot see",
    "DSS-25": "needs the profiler thread's first walk told apart from a warm-up walk; no rule yet",
    # issue 25: the ReJIT protocol's author rules, until the validator records ReJIT calls and callbacks
    "REJIT-02": "needs RequestReJIT/RequestRevert's HRESULT and the event mask tied together; no rule yet",
    "REJIT-10": "needs ReJITError recorded beside RequestReJIT; no rule yet (issue 25 part 5)",
    "REJIT-12": "needs JITInlining decisions held against later ReJIT requests; no rule yet",
    "REJIT-23": "needs the function control's bodies recorded with their size (issue 25 part 5)",
    "REJIT-27": "a profiler's own locking is invisible to the recording proxy",
}


def test_author_rules_are_checked_by_a_profiler_layer_or_listed_with_why() -> None:
    unchecked = {
        item.id
        for item in CATALOG.values()
        if item.kind is Kind.AUTHOR_RULE and not item.layers & {Layer.VALIDATOR, Layer.HOOK, Layer.FUZZ}
    }
    assert unchecked == set(UNCHECKED_AUTHOR_RULES)


def test_clause_lookup_and_unknown_id() -> None:
    assert clause("DSS-16").kind is Kind.ORDERING
    with pytest.raises(UnknownClause, match="DSS-99"):
        clause("DSS-99")


def test_with_layer_filters_in_id_order() -> None:
    model = with_layer(Layer.MODEL)
    assert [c.id for c in model] == sorted(c.id for c in model)
    assert all(Layer.MODEL in c.layers for c in model)
    assert {c.id for c in model} >= {f"DSS-{n:02d}" for n in (3, 16, 20, 26)}


def test_duplicate_ids_are_refused() -> None:
    one = clause("DSS-01")
    with pytest.raises(ModelError, match="DSS-01 is defined twice"):
        _assemble([one], [one])


def test_clause_refuses_wrong_prefix_and_question_on_non_ambiguity() -> None:
    base = dict(
        title="abc",
        paraphrase="a paraphrase of ten",
        section="Remarks",
        layers=frozenset({Layer.MODEL}),
    )
    with pytest.raises(ValidationError, match="prefix"):
        Clause(id="FE2-01", document=Document.DO_STACK_SNAPSHOT, kind=Kind.INVARIANT, **base)
    with pytest.raises(ValidationError, match="question"):
        Clause(id="DSS-99", document=Document.DO_STACK_SNAPSHOT, kind=Kind.AMBIGUITY, **base)
    with pytest.raises(ValidationError, match="question"):
        Clause(
            id="DSS-99",
            document=Document.DO_STACK_SNAPSHOT,
            kind=Kind.INVARIANT,
            question="why?",
            **base,
        )


def test_every_dss_model_clause_has_an_example_and_a_property_test() -> None:
    from pathlib import Path

    here = Path(__file__).parent
    source = "\n".join(p.read_text() for p in here.glob("test_*.py"))
    for item in load("dss"):
        if Layer.MODEL not in item.layers:
            continue
        token = item.id.replace("-", "_")
        names = re.findall(rf"def (test_{token}_\w+)", source)
        assert any(n.endswith("_example") for n in names), f"{item.id}: no example test"
        assert any(n.endswith("_property") for n in names), f"{item.id}: no property test"
