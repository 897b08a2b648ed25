"""The IL checker's rules rest on the catalog (issue 25): every rule of :data:`clr_model.il.RULES` is a
clause of ECMA-335 in clr_model/catalog/il.toml, named after the rule, with the standard's sentence quoted,
the model layer and a fix; and the ReJIT pages' clauses (rejit*.toml) quote their pages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clr_model.catalog.base import PREFIXES, SOURCES, Clause, Document, Kind, Layer
from clr_model.clauses import CATALOG, clause
from clr_model.il import NOTES, RULES, ILFinding, check_body
from clr_model.il_metadata import CallSignature, RecordedMetadata


def unbacked(rules: Iterable[str], catalog: Mapping[str, Clause]) -> list[str]:
    """Each way a rule of the IL checker fails to rest on a quoted ECMA-335 clause, one line per problem."""
    problems = []
    for rule in rules:
        item = catalog.get(rule)
        if item is None:
            problems.append(f"{rule}: no clause of the catalog")
            continue
        if item.document is not Document.ECMA_335:
            problems.append(f"{rule}: its clause is of {item.document.value}, not ECMA-335")
        if not item.quote.strip():
            problems.append(f"{rule}: its clause quotes no sentence")
        if Layer.MODEL not in item.layers:
            problems.append(f"{rule}: its clause does not claim the model layer")
        if item.kind is Kind.AUTHOR_RULE and not item.fix:
            problems.append(f"{rule}: its clause has no fix")
    return problems


def test_every_il_checker_rule_rests_on_a_quoted_ecma_clause() -> None:
    assert unbacked(RULES, CATALOG) == []


def test_every_il_clause_is_a_rule_of_the_checker() -> None:
    """No IL clause claims the model layer without a checker rule behind it, and the catalog's IL family is
    exactly the checker's rules."""
    il = {c.id for c in CATALOG.values() if c.document is Document.ECMA_335}
    assert il == set(RULES)
    assert PREFIXES[Document.ECMA_335] == "IL"


def test_unbacked_names_a_rule_without_a_clause_a_quote_or_the_model_layer() -> None:
    broken = dict(CATALOG)
    broken["IL-MAXSTACK"] = CATALOG["IL-MAXSTACK"].model_copy(update={"quote": ""})
    broken["IL-TOKEN"] = CATALOG["IL-TOKEN"].model_copy(update={"layers": frozenset()})
    broken["IL-OPCODE"] = CATALOG["IL-OPCODE"].model_copy(update={"fix": None})
    broken["IL-PREFIX"] = CATALOG["REJIT-01"]
    assert unbacked([*RULES, "IL-NEW-RULE"], broken) == [
        "IL-OPCODE: its clause has no fix",
        "IL-PREFIX: its clause is of ICorProfilerInfo::SetILFunctionBody, not ECMA-335",
        "IL-PREFIX: its clause does not claim the model layer",
        "IL-MAXSTACK: its clause quotes no sentence",
        "IL-TOKEN: its clause does not claim the model layer",
        "IL-NEW-RULE: no clause of the catalog",
    ]


def test_IL_FALLTHROUGH_END_a_finding_names_its_clause_and_sentence() -> None:
    """A finding's rule is the clause a report quotes: a tiny body of one nop falls off its end."""
    findings = check_body(bytes([0x06, 0x00]), RecordedMetadata(), method=CallSignature(0))
    assert [f.rule for f in findings] == ["IL-FALLTHROUGH-END"]
    assert "fall through" in clause(findings[0].rule).quote


def test_rejit_and_il_clauses_quote_their_documents_and_author_rules_say_the_fix() -> None:
    families = [c for c in CATALOG.values() if c.id.split("-")[0] in ("REJIT", "IL")]
    assert len(families) >= 60
    for item in families:
        assert item.quote.strip(), f"{item.id}: no quoted sentence"
        assert item.section.strip(), item.id
        if item.kind is Kind.AUTHOR_RULE:
            assert item.fix, f"{item.id}: an author rule without a fix"


def test_every_document_says_where_it_is() -> None:
    assert set(SOURCES) == set(Document) == set(PREFIXES)
    rejit_pages = [d for d, p in PREFIXES.items() if p == "REJIT"]
    assert len(rejit_pages) == 16
    assert all(SOURCES[d].startswith("https://learn.microsoft.com/") for d in rejit_pages)


def test_rejit_ambiguities_ask_a_question_and_claim_no_layer() -> None:
    """The ReJIT pages' contradictions (with each other or with runtime issues) are open questions: one
    claims a layer only with the model's choice written beside it (REJIT-21: the model holds the function
    control valid inside its GetReJITParameters, a call elsewhere a note)."""
    asked = [c for c in CATALOG.values() if c.id.startswith("REJIT-") and c.kind is Kind.AMBIGUITY]
    assert {c.id for c in asked} >= {"REJIT-04", "REJIT-13", "REJIT-19", "REJIT-35"}
    for item in asked:
        assert item.question and item.question.endswith("?"), item.id
        assert not item.layers or item.model_choice, item.id


def test_the_checker_s_notes_are_harness_observations_never_failures() -> None:
    """What the checker reports without a sentence to quote (Partition I §12.4.2.7-8 is in no transcription
    we could read) is the harness's observation: a VAL-IL-* clause of kind observation (the validator shows
    it as a note), with the reason it is not a failure; a finding of it says so (``note``)."""
    assert set(NOTES) == {"VAL-IL-EH-NESTING", "VAL-IL-TRY-STACK"}
    assert not set(NOTES) & set(RULES)
    for rule in NOTES:
        item = CATALOG[rule]
        assert item.document is Document.HARNESS and item.kind is Kind.OBSERVATION, rule
        assert item.reason and "§12.4.2" in item.reason, rule
        assert {Layer.MODEL, Layer.VALIDATOR, Layer.FUZZ} <= item.layers, rule
        assert ILFinding(rule=rule, message="m").note
    assert not ILFinding(rule="IL-STACK-EMPTY", message="m").note
