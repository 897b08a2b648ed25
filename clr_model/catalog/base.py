"""The vocabulary of the clause catalog: what a clause is."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Document(StrEnum):
    """The four contract documents in ``shared/spec``, the further Microsoft pages a validator rule rests on
    (:data:`SOURCES` gives where each is), and the harness's own rules (no document)."""

    DO_STACK_SNAPSHOT = "DoStackSnapshot.md"
    FUNCTION_ENTER2 = "FunctionEnter2.md"
    MOVED_REFERENCES2 = "MovedReferences2.md"
    CALLER_ALLOCATED_BUFFERS = "caller-allocated-buffers.md"
    OBJECT_REFERENCES = "ICorProfilerCallback::ObjectReferences"
    ROOT_REFERENCES2 = "ICorProfilerCallback2::RootReferences2"
    GARBAGE_COLLECTION_STARTED = "ICorProfilerCallback2::GarbageCollectionStarted"
    SHUTDOWN = "ICorProfilerCallback::Shutdown"
    INITIALIZE = "ICorProfilerCallback::Initialize"
    FORCE_GC = "ICorProfilerInfo::ForceGC"
    SET_ENTER_LEAVE_HOOKS2 = "ICorProfilerInfo2::SetEnterLeaveFunctionHooks2"
    COR_PRF_MONITOR = "COR_PRF_MONITOR Enumeration"
    PROFILER_DETACH_SUCCEEDED = "ICorProfilerCallback3::ProfilerDetachSucceeded"
    SET_IL_FUNCTION_BODY = "ICorProfilerInfo::SetILFunctionBody"
    #: the ReJIT pages (issue 25): the REJIT family with SET_IL_FUNCTION_BODY; the flag's row of the
    #: COR_PRF_MONITOR page is its own document here (that page's attach clauses use ATT-)
    ENABLE_REJIT = "COR_PRF_MONITOR Enumeration: COR_PRF_ENABLE_REJIT"
    REQUEST_REJIT = "ICorProfilerInfo4::RequestReJIT"
    REQUEST_REJIT_WITH_INLINERS = "ICorProfilerInfo10::RequestReJITWithInliners"
    REQUEST_REVERT = "ICorProfilerInfo4::RequestRevert"
    GET_REJIT_PARAMETERS = "ICorProfilerCallback4::GetReJITParameters"
    FUNCTION_CONTROL = "ICorProfilerFunctionControl Interface"
    FUNCTION_CONTROL_SET_IL_FUNCTION_BODY = "ICorProfilerFunctionControl::SetILFunctionBody"
    FUNCTION_CONTROL_SET_CODEGEN_FLAGS = "ICorProfilerFunctionControl::SetCodegenFlags"
    FUNCTION_CONTROL_SET_IL_INSTRUMENTED_CODE_MAP = "ICorProfilerFunctionControl::SetILInstrumentedCodeMap"
    REJIT_COMPILATION_STARTED = "ICorProfilerCallback4::ReJITCompilationStarted"
    REJIT_COMPILATION_FINISHED = "ICorProfilerCallback4::ReJITCompilationFinished"
    REJIT_ERROR = "ICorProfilerCallback4::ReJITError"
    GET_REJIT_IDS = "ICorProfilerInfo4::GetReJITIDs"
    GET_IL_FUNCTION_BODY = "ICorProfilerInfo::GetILFunctionBody"
    GET_IL_FUNCTION_BODY_ALLOCATOR = "ICorProfilerInfo::GetILFunctionBodyAllocator"
    #: the four "...Started" callbacks whose ID is not valid for an information request until its
    #: "...Finished" callback: the LDS family (loading)
    APP_DOMAIN_CREATION_STARTED = "ICorProfilerCallback::AppDomainCreationStarted"
    ASSEMBLY_LOAD_STARTED = "ICorProfilerCallback::AssemblyLoadStarted"
    MODULE_LOAD_STARTED = "ICorProfilerCallback::ModuleLoadStarted"
    CLASS_LOAD_STARTED = "ICorProfilerCallback::ClassLoadStarted"
    #: the callback a DoStackSnapshot walk calls for each frame (a function the profiler writes)
    STACK_SNAPSHOT_CALLBACK = "StackSnapshotCallback Function"
    #: the three methods that hand a WithInfo hook's frame info out: the FE3 family
    GET_FUNCTION_ENTER3_INFO = "ICorProfilerInfo3::GetFunctionEnter3Info"
    GET_FUNCTION_LEAVE3_INFO = "ICorProfilerInfo3::GetFunctionLeave3Info"
    GET_FUNCTION_TAILCALL3_INFO = "ICorProfilerInfo3::GetFunctionTailcall3Info"
    THREAD_DESTROYED = "ICorProfilerCallback::ThreadDestroyed"
    GET_NOTIFIED_EXCEPTION_CLAUSE_INFO = "ICorProfilerInfo2::GetNotifiedExceptionClauseInfo"
    #: the two lookups by token that load what they name: the TOK family
    GET_FUNCTION_FROM_TOKEN_AND_TYPE_ARGS = "ICorProfilerInfo2::GetFunctionFromTokenAndTypeArgs"
    GET_CLASS_FROM_TOKEN_AND_TYPE_ARGS = "ICorProfilerInfo2::GetClassFromTokenAndTypeArgs"
    #: the two mapper setters, each "set only once": the MAP family
    SET_FUNCTION_ID_MAPPER = "ICorProfilerInfo::SetFunctionIDMapper"
    SET_FUNCTION_ID_MAPPER2 = "ICorProfilerInfo3::SetFunctionIDMapper2"
    INITIALIZE_CURRENT_THREAD = "ICorProfilerInfo4::InitializeCurrentThread"
    DYNAMIC_METHOD_JIT_COMPILATION_STARTED = "ICorProfilerCallback8::DynamicMethodJITCompilationStarted"
    #: the CLI standard, Partitions I-III: the IL family (method bodies), one clause per rule of the IL
    #: checker (:data:`clr_model.il.RULES`), named after the rule
    ECMA_335 = "ECMA-335"
    #: the Linux man page of async-signal-safe functions (man-pages 6.03), held against a profiler's handlers
    SIGNAL_SAFETY = "signal-safety(7)"
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
    #: no document states it: the validator shows it as a note (never a failure) so an author can check it is
    #: meant; ``reason`` says why it is worth a look
    OBSERVATION = "observation"


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
    Document.OBJECT_REFERENCES: "ORF",
    Document.ROOT_REFERENCES2: "RRF",
    Document.GARBAGE_COLLECTION_STARTED: "GCS",
    Document.SHUTDOWN: "SHD",
    Document.INITIALIZE: "INI",
    Document.FORCE_GC: "FGC",
    Document.SET_ENTER_LEAVE_HOOKS2: "SEL",
    Document.COR_PRF_MONITOR: "ATT",
    Document.PROFILER_DETACH_SUCCEEDED: "DET",
    Document.SIGNAL_SAFETY: "ASYNC",
    Document.SET_IL_FUNCTION_BODY: "REJIT",
    Document.ENABLE_REJIT: "REJIT",
    Document.REQUEST_REJIT: "REJIT",
    Document.REQUEST_REJIT_WITH_INLINERS: "REJIT",
    Document.REQUEST_REVERT: "REJIT",
    Document.GET_REJIT_PARAMETERS: "REJIT",
    Document.FUNCTION_CONTROL: "REJIT",
    Document.FUNCTION_CONTROL_SET_IL_FUNCTION_BODY: "REJIT",
    Document.FUNCTION_CONTROL_SET_CODEGEN_FLAGS: "REJIT",
    Document.FUNCTION_CONTROL_SET_IL_INSTRUMENTED_CODE_MAP: "REJIT",
    Document.REJIT_COMPILATION_STARTED: "REJIT",
    Document.REJIT_COMPILATION_FINISHED: "REJIT",
    Document.REJIT_ERROR: "REJIT",
    Document.GET_REJIT_IDS: "REJIT",
    Document.GET_IL_FUNCTION_BODY: "REJIT",
    Document.GET_IL_FUNCTION_BODY_ALLOCATOR: "REJIT",
    Document.APP_DOMAIN_CREATION_STARTED: "LDS",
    Document.ASSEMBLY_LOAD_STARTED: "LDS",
    Document.MODULE_LOAD_STARTED: "LDS",
    Document.CLASS_LOAD_STARTED: "LDS",
    Document.STACK_SNAPSHOT_CALLBACK: "SSC",
    Document.GET_FUNCTION_ENTER3_INFO: "FE3",
    Document.GET_FUNCTION_LEAVE3_INFO: "FE3",
    Document.GET_FUNCTION_TAILCALL3_INFO: "FE3",
    Document.THREAD_DESTROYED: "THD",
    Document.GET_NOTIFIED_EXCEPTION_CLAUSE_INFO: "EXC",
    Document.GET_FUNCTION_FROM_TOKEN_AND_TYPE_ARGS: "TOK",
    Document.GET_CLASS_FROM_TOKEN_AND_TYPE_ARGS: "TOK",
    Document.SET_FUNCTION_ID_MAPPER: "MAP",
    Document.SET_FUNCTION_ID_MAPPER2: "MAP",
    Document.INITIALIZE_CURRENT_THREAD: "ICT",
    Document.DYNAMIC_METHOD_JIT_COMPILATION_STARTED: "DYN",
    Document.ECMA_335: "IL",
    Document.HARNESS: "VAL",
}

_PAGES = "https://learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/"


def _method_page(document: Document) -> str:
    """The Microsoft page of an ``Interface::Method`` document: the two names in lower case, ``-method``
    after them."""
    interface, method = document.split("::")
    return f"{_PAGES}{interface.lower()}-{method.lower()}-method"


#: where each document that is not one Microsoft method page is
_OWN_SOURCES: dict[Document, str] = {
    Document.DO_STACK_SNAPSHOT: "shared/spec/DoStackSnapshot.md",
    Document.FUNCTION_ENTER2: "shared/spec/FunctionEnter2.md",
    Document.MOVED_REFERENCES2: "shared/spec/MovedReferences2.md",
    Document.CALLER_ALLOCATED_BUFFERS: "shared/spec/caller-allocated-buffers.md",
    Document.COR_PRF_MONITOR: _PAGES + "cor-prf-monitor-enumeration",
    Document.ENABLE_REJIT: _PAGES + "cor-prf-monitor-enumeration#feature-enabling-flags",
    Document.FUNCTION_CONTROL: _PAGES + "icorprofilerfunctioncontrol-interface",
    Document.STACK_SNAPSHOT_CALLBACK: _PAGES + "stacksnapshotcallback-function",
    Document.ECMA_335: (
        "ECMA-335 6th edition (June 2012), https://www.ecma-international.org/publications-and-standards/"
        "standards/ecma-335/; quoted from the Markdown transcription github.com/stakx/ecma-335 (docs/*.md)"
    ),
    Document.SIGNAL_SAFETY: "https://man7.org/linux/man-pages/man7/signal-safety.7.html (man-pages 6.03)",
    Document.HARNESS: "profharness (the harness's own rules)",
}
#: where each document is: a contract file in ``shared/spec``, or the Microsoft page (its quotes were read
#: from the dotnet/docs sources of these pages; an ``Interface::Method`` document's page is named after it)
SOURCES: dict[Document, str] = {d: _OWN_SOURCES.get(d) or _method_page(d) for d in Document}


class Clause(BaseModel):
    """One normative sentence (or an ambiguity) of a contract document."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``PREFIX-NN``; the harness's rules and the IL checker's are named (``VAL-CRASH``, ``IL-MAXSTACK``)
    id: str = Field(pattern=r"^([A-Z][A-Z0-9]{1,5}-\d{2}|(VAL|IL)-[A-Z][A-Z0-9-]*[A-Z0-9])$")
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
    during: tuple[str, ...] = Field(
        default=(), description="the callbacks the sentence speaks of (e.g. no inspection during them)"
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
        if self.kind is Kind.OBSERVATION and self.document is not Document.HARNESS:
            raise ValueError(f"{self.id}: an observation is what no document states: a harness rule")
        return self
