"""Clauses of caller-allocated-buffers.md (``shared/spec``): every normative sentence, plus ambiguities."""

from __future__ import annotations

from clr_model.catalog.base import Clause, Document, Kind, Layer

_D = Document.CALLER_ALLOCATED_BUFFERS
M, LV, V = Layer.MODEL, Layer.LIVE, Layer.VALIDATOR

CLAUSES: tuple[Clause, ...] = (
    Clause(
        id="BUF-01", title="cBufferSizeStart = elements allocated", document=_D, section="Behaviour",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="cBufferSizeStart is the number of elements (not bytes) the caller allocated; the method "
        "never writes beyond it.",
        quote="The cBufferSizeStart parameter specifies the number of elements allocated in the buffer.",
    ),
    Clause(
        id="BUF-02", title="*pcBufferMax = total available", document=_D, section="Behaviour",
        kind=Kind.RETURN_CODE, layers=frozenset({M, LV}),
        paraphrase="*pcBufferMax is set to the total number of elements available, whatever the buffer size "
        "(not the number actually written).",
        quote="So, pcBufferMax is independent of the actual size of the caller-allocated buffer.",
    ),
    Clause(
        id="BUF-03", title="as many elements as fit", document=_D, section="Behaviour",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="The buffer is filled with min(available, cBufferSizeStart) elements.",
        quote="After the method returns, this buffer will be filled with as many elements as possible.",
    ),
    Clause(
        id="BUF-04", title="NULL buffer needs size 0", document=_D, section="Behaviour",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, LV, V}),
        paraphrase="A caller passing a NULL InfoBuffer must pass cBufferSizeStart 0 (live: every method "
        "accepts that legal (NULL, 0) form).",
        quote="If InfoBuffer is null, cBufferSizeStart must be 0.",
    ),
    Clause(
        id="BUF-05", title="S_OK when elements returned", document=_D, section="Behaviour",
        kind=Kind.RETURN_CODE, layers=frozenset({M, LV}),
        paraphrase="When any element is returned the method returns S_OK and sets *pcBufferMax to the total.",
        quote="If any elements are returned, the method returns S_OK and sets pcBufferMax to the total "
        "number "
        "of elements available.",
    ),
    Clause(
        id="BUF-06", title="single-pass client", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M}),
        paraphrase="Single pass: allocate a buffer expected to be large enough and reallocate (and call "
        "again) "
        "when it proves too small, otherwise data are truncated.",
        quote="Be prepared to reallocate the buffer if it proves to be too small. Otherwise, data truncation "
        "may occur.",
    ),
    Clause(
        id="BUF-07", title="double-pass client", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M}),
        paraphrase="Double pass: call with a zero-length buffer to learn *pcBufferMax, then allocate exactly "
        "that many elements and call again.",
        quote="First call with a zero-length InfoBuffer parameter to obtain the correct buffer size. "
        "Then set "
        "the buffer size to the value returned in pcBufferMax and call the function again.",
    ),
    Clause(
        id="BUF-08", title="truncation test", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="After the call, *pcBufferMax > cBufferSizeStart means the data were truncated: allocate "
        "*pcBufferMax elements and call again.",
        quote="If pcBufferMax points to a value that is larger than cBufferSizeStart, allocate a larger "
        "InfoBuffer buffer, update cBufferSizeStart with the new, larger size, and call the method again.",
    ),
    Clause(
        id="BUF-09", title="HRESULT of a too-small buffer", document=_D, section="Behaviour",
        kind=Kind.AMBIGUITY, layers=frozenset({M, LV}),
        paraphrase="The page promises S_OK 'if any elements are returned' and truncation, but says "
        "nothing of "
        "an error code, nor whether a string's count includes its NUL terminator.",
        question="With 0 < cBufferSizeStart < available, is the answer S_OK with a truncated buffer, or "
        "HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER)? dotnet/runtime (src/coreclr/vm/"
        "proftoeeinterfaceimpl.cpp) does not agree with itself: GetModuleInfo, GetModuleInfo2 and "
        "GetEnvironmentVariable return 0x8007007A and copy nothing when cchName < length (GetModuleInfo/2 "
        "leave only the NUL they pre-store in element 0); GetClassIDInfo2 clamps, returns S_OK and sets "
        "*pcNumTypeArgs to the number copied (not the total); GetAppDomainInfo and GetAssemblyInfo, today "
        "(observed on 3.1.23 and 8.0.4), copy a truncated, NUL-terminated name with S_OK, and so does 8.0's "
        "GetRuntimeInformation where 3.1's returned 0x8007007A. For WCHAR buffers the runtime counts the "
        "terminating NUL (trueLen = wcslen + 1), which the page never says.",
        model_choice="The model follows the page: S_OK, min(available, size) elements written, "
        "*pcBufferMax = total. Strings count the NUL (as GetModuleInfo2/GetAppDomainInfo do) and a truncated "
        "string keeps a NUL in its last written element (expected_content, string_elements). check_observed "
        "gives each observed field one clause: the HRESULT of a too-small buffer is BUF-09 (not BUF-05); "
        "the fill is BUF-03 whatever the HRESULT, so the runtime's 0x8007007A answer with nothing, or only "
        "the pre-stored NUL, in element 0 is a BUF-09 and a BUF-03 divergence (the NUL is one element "
        "written; at cBufferSizeStart 1 it is exactly the model's cut string); a string's *pcBufferMax one "
        "short of the model's (the NUL left out) and a written last element of a string that is not the NUL "
        "are BUF-09, other counts BUF-02, other elements BUF-03. The client strategies accept 0x8007007A.",
    ),
    Clause(
        id="BUF-10", title="HRESULT when nothing is returned", document=_D, section="Behaviour",
        kind=Kind.AMBIGUITY, layers=frozenset({M, LV}),
        paraphrase="The page gives the return code only 'if any elements are returned'.",
        question="What does the method return when no element is returned: a size-0 / NULL buffer (the first "
        "call of the double-pass method) or nothing available?",
        model_choice="S_OK with *pcBufferMax = total, as dotnet/runtime does for a zero-size query "
        "(GetModuleInfo2, GetClassIDInfo2); the double-pass method of the same page depends on it. An "
        "argument error (E_INVALIDARG, E_POINTER) for the legal (NULL, 0) form is attributed to BUF-04 (the "
        "form was refused), not to BUF-10.",
    ),
    Clause(
        id="BUF-11", title="truncation check under the wrong method", document=_D, section="Remarks",
        kind=Kind.AMBIGUITY, layers=frozenset({M}),
        paraphrase="The paragraph about the (slower) double-pass method describes the truncation check and "
        "reallocation, which is the single-pass procedure.",
        question="Does a double-pass client also have to re-check *pcBufferMax after its second call (the "
        "data can grow between the calls, e.g. a name), or is the check only for single-pass clients?",
        model_choice="Both client strategies apply the BUF-08 check after every call and retry, bounded, "
        "while *pcBufferMax keeps growing; an answer that never settles is a typed error.",
    ),
    Clause(
        id="BUF-12", title="ULONG32 counts", document=_D, section="Signature",
        kind=Kind.INVARIANT, layers=frozenset({M}),
        paraphrase="cBufferSizeStart and *pcBufferMax are ULONG32: element counts in [0, 2**32).",
        quote="[in]  ULONG32 cBufferSizeStart, [out] ULONG32 *pcBufferMax,",
    ),
)
