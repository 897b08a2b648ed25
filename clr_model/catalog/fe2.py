"""Clauses of FunctionEnter2.md (``shared/spec``): every normative sentence, plus its ambiguities."""

from __future__ import annotations

from clr_model.catalog.base import Clause, Document, Kind, Layer

_D = Document.FUNCTION_ENTER2
M, LV, EMU, V = Layer.MODEL, Layer.LIVE, Layer.EMU, Layer.VALIDATOR

CLAUSES: tuple[Clause, ...] = (
    Clause(
        id="FE2-01", title="funcId is the callee", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="funcId identifies the function to which control is being passed, not the caller.",
        quote="The identifier of the function to which control is passed.",
    ),
    Clause(
        id="FE2-02", title="clientData is the mapper's value", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="clientData equals the value the profiler's FunctionIDMapper returned for funcId "
        "(the runtime's default mapper returns funcId itself when none is installed).",
        quote="The remapped function identifier, which the profiler previously specified by using the "
        "FunctionIDMapper function.",
    ),
    Clause(
        id="FE2-03", title="func is an opaque frame handle", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="func is an opaque COR_PRF_FRAME_INFO handle; passed back to "
        "ICorProfilerInfo2::GetFunctionInfo2 during the hook it must be accepted.",
        quote="The profiler should treat this as an opaque handle that can be passed back to the execution "
        "engine in the ICorProfilerInfo2::GetFunctionInfo2 method.",
        model_choice="func is opaque, so the model never judges its value (NULL included); it predicts that "
        "GetFunctionInfo2(funcId, func) during the hook succeeds and names the entered function, whatever "
        "the event mask. The page conditions only argumentInfo on a flag and never mentions "
        "COR_PRF_ENABLE_FRAME_INFO, so the model does not require it for func (a runtime that, without "
        "it, passes a handle GetFunctionInfo2 refuses would diverge).",
    ),
    Clause(
        id="FE2-04", title="argumentInfo needs ENABLE_FUNCTION_ARGS", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="Argument information is available only when COR_PRF_ENABLE_FUNCTION_ARGS (0x02000000) is "
        "set in the event mask; the model expects argumentInfo NULL otherwise, and non-NULL when it is set.",
        quote="In order to access argument information, the COR_PRF_ENABLE_FUNCTION_ARGS flag must be set.",
    ),
    Clause(
        id="FE2-05", title="func/argumentInfo die with the hook", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="The profiler must not use func or argumentInfo after FunctionEnter2 returns.",
        quote="The values of the func and argumentInfo parameters are not valid after the FunctionEnter2 "
        "function returns because the values may change or be destroyed.",
    ),
    Clause(
        id="FE2-06", title="naked implementation", document=_D, section="Remarks",
        kind=Kind.ABI_RULE, layers=frozenset({M, EMU, V}),
        paraphrase="The hook is naked: no compiler prologue, so at its first instruction [ESP] is the "
        "return address and the four __stdcall parameters follow at ESP+4..ESP+16 in declaration order.",
        quote="The implementation must use the __declspec(naked) storage-class attribute.",
    ),
    Clause(
        id="FE2-07", title="EE saves no registers", document=_D, section="Remarks",
        kind=Kind.ABI_RULE, layers=frozenset({M, EMU}),
        paraphrase="The runtime saves no register before calling the hook, so even the registers that "
        "__stdcall treats as scratch (EAX, ECX, EDX, EFLAGS) must come back unchanged.",
        quote="The execution engine does not save any registers before calling this function.",
    ),
    Clause(
        id="FE2-08", title="save/restore every register incl. FPU", document=_D, section="Remarks",
        kind=Kind.ABI_RULE, layers=frozenset({M, EMU, V}),
        paraphrase="On entry the hook saves every register it uses, x87 and SSE state included, and "
        "restores them before returning.",
        quote="On entry, you must save all registers that you use, including those in the floating-point "
        "unit (FPU).",
    ),
    Clause(
        id="FE2-09", title="callee pops the parameters", document=_D, section="Remarks",
        kind=Kind.ABI_RULE, layers=frozenset({M, EMU, V}),
        paraphrase="On exit the hook pops the parameters its caller pushed (x86: ret 16), so after the "
        "return ESP is 4 (return address) + 16 bytes above its value at the hook's first instruction.",
        quote="On exit, you must restore the stack by popping off all the parameters that were pushed by its "
        "caller.",
    ),
    Clause(
        id="FE2-10", title="must not block", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="The hook must not block (it would delay garbage collection).",
        quote="The implementation of FunctionEnter2 should not block because it will delay garbage "
        "collection.",
    ),
    Clause(
        id="FE2-11", title="must not trigger a GC", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="The hook must not attempt a garbage collection (the stack may not be GC-friendly); a GC "
        "attempted anyway blocks until FunctionEnter2 returns.",
        quote="If a garbage collection is attempted, the runtime will block until FunctionEnter2 returns.",
    ),
    Clause(
        id="FE2-12", title="no managed calls or allocation", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="The hook must not call managed code nor cause a managed memory allocation in any way.",
        quote="Also, the FunctionEnter2 function must not call into managed code or in any way cause a "
        "managed "
        "memory allocation.",
    ),
    Clause(
        id="FE2-13", title="x86-only ABI text", document=_D, section="Remarks",
        kind=Kind.AMBIGUITY, layers=frozenset({M}),
        paraphrase="The naked / __stdcall / pop-the-parameters rules are written for 32-bit x86 Windows; "
        "the page says nothing about x64, ARM64 or Unix calling conventions.",
        question="Do FE2-06, FE2-07 and FE2-09 apply on x64 and on Unix (SysV) at all? On those platforms "
        "the runtime calls hooks through its own register-saving stubs and there is no __stdcall or naked "
        "attribute, but the page neither says so nor gives replacement rules.",
        model_choice="The page's register and stack rules are stated for x86 only: abi_clauses(arch) lists "
        "no ABI clause for other architectures instead of guessing rules the page does not state. The hook "
        "checker reads them on x64 as the System V ABI's (clr_model.abi.ABI['x64']: FE2-06, FE2-08, "
        "FE2-09), a reading the page does not give.",
    ),
    Clause(
        id="FE2-14", title="argumentInfo locates the arguments", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV, V}),
        paraphrase="argumentInfo points to a COR_PRF_FUNCTION_ARGUMENT_INFO giving the memory locations of "
        "the function's arguments.",
        quote="A pointer to a COR_PRF_FUNCTION_ARGUMENT_INFO structure that specifies the locations in "
        "memory "
        "of the function's arguments.",
        model_choice="The page does not say how the locations are cut into ranges; predict_argument_ranges "
        "reads it as one range per argument in declaration order ('this' first for an instance method), "
        "each as long as the argument's type and holding the value as passed, totalArgumentSize their sum.",
    ),
)
