"""The vocabulary of the clause catalog: what a clause is."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Document(StrEnum):
    """The four contract documents in ``shared/spec``, and the harness's own rules (no document)."""

    DO_STACK_SNAPSHOT = "DoStackSnapshot.md"
    FUNCTION_ENTER2 = "FunctionEnter2.md"
    MOVED_REFERENCES2 = "MovedReferences2.md"
    CALLER_ALLOCATED_BUFFERS = "caller-allocated-buffers.md"
    #: rules the harness holds a profiler to that no document states (a crash, a hang, a failed load): each
    #: says why in ``reason``
    HARNESS = "profharness"


class Kind(StrEnum):
    RETURN_CODE = "return-code"
    ORDERING = "ordering"
    INVARIANT = "invariant"
    AUTHOR_RULE = "author-rule"  # a rule for profiler authors (checked on a profiler, not on the runtime)
    ABI_RULE = "abi-rule"
    AMBIGUITY = "ambiguity"  # the documents are unclear or contradict each other; `question` says how


class Layer(StrEnum):
    MODEL = "model"  # clr_model implements it
    LIVE = "live"  # the conformance suite checks it on live runtimes
    EMU = "emu"  # the emulator checks it on replayed machine state
    HOOK = "hook"  # the hook checker runs hook machine code against it
    VALIDATOR = "validator"  # the validator holds third-party profilers' recordings to it
    FUZZ = "fuzz"  # the profiler fuzzer checks it against what only its fake runtime knows


PREFIXES: dict[Document, str] = {
    Document.DO_STACK_SNAPSHOT: "DSS",
    Document.FUNCTION_ENTER2: "FE2",
    Document.MOVED_REFERENCES2: "MR2",
    Document.CALLER_ALLOCATED_BUFFERS: "BUF",
    Document.HARNESS: "VAL",
}


class Clause(BaseModel):
    """One normative sentence (or an ambiguity) of a contract document."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^([A-Z][A-Z0-9]{1,5}-\d{2}|VAL-[A-Z][A-Z0-9-]*[A-Z0-9])$")
    title: str = Field(min_length=3, description="a few words, used in tables")
    paraphrase: str = Field(min_length=10, description="what the document requires, in our words")
    document: Document
    section: str = Field(min_length=1, description="heading of the section the sentence stands in")
    kind: Kind
    layers: frozenset[Layer]
    quote: str = Field(default="", description="the sentence itself, when short enough to quote")
    question: str | None = Field(default=None, description="for ambiguities: the question left open")
    model_choice: str | None = Field(
        default=None, description="for ambiguities the model must decide: what it does and why"
    )
    reason: str | None = Field(
        default=None, description="for the harness's own rules (no document states them): why it holds"
    )
    fix: str | None = Field(
        default=None, description="for rules held against a profiler: what to change, one line"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Clause:
        prefix = PREFIXES[self.document]
        if not self.id.startswith(prefix + "-"):
            raise ValueError(f"{self.id}: clauses of {self.document} use the prefix {prefix}-")
        if (self.kind is Kind.AMBIGUITY) != (self.question is not None):
            raise ValueError(f"{self.id}: an ambiguity needs a question, and only an ambiguity has one")
        if (self.document is Document.HARNESS) != (self.reason is not None):
            raise ValueError(f"{self.id}: a harness rule needs a reason, and only a harness rule has one")
        return self
