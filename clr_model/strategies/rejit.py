"""Hypothesis strategies for the ReJIT model (:mod:`clr_model.rejit`): protocol runs, each a sequence of
events a runtime and a profiler could produce, with what the generator knows of each step (the truth a test
holds the model to, kept by the generator itself, never read from the model).

A run: a few (module, methodDef) keys; the profiler requests recompilations (from its own thread, or inside
a callback), reverts them; the runtime asks for the parameters of each requested key once per request
(GetReJITParameters, the profiler calling its function control inside, or, now and then, after it
returned), compiles one or more instantiations (ReJITCompilationStarted/Finished with fresh ReJITIDs) or
reports ReJITError.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from clr_model import api
from clr_model.api import Fact
from clr_model.il_asm import encode_body
from clr_model.rejit import PARAMETERS_CALLBACK, Key, function_control_methods

__all__ = ["ProtocolStep", "protocol_runs", "straight_bodies"]

#: where a profiler could make a call: its own thread (None, drawn as often as all callbacks together) or
#: inside a callback (any but the one that hands over the function control)
_CALLBACKS = st.one_of(st.none(), st.sampled_from(sorted(m.name for m in api.callbacks()
                                                         if m.name != PARAMETERS_CALLBACK)))  # fmt: skip


@dataclass(frozen=True)
class ProtocolStep:
    """One event. ``kind``: request, revert, parameters (begin), fc (a function-control call), parameters_end,
    started, finished, error. What the generator knows: ``again`` (a request of a key whose earlier request
    is active), ``inside_parameters`` (a function-control call inside its GetReJITParameters)."""

    kind: str
    key: Key | None = None
    name: str = ""
    callback: str | None = None
    function: int = 0
    rejit_id: int = 0
    again: bool = False
    inside_parameters: bool = False


@st.composite
def protocol_runs(draw: st.DrawFn, max_steps: int = 30) -> tuple[list[ProtocolStep], dict[Key, bool]]:
    """A run's steps and, per key, whether a request of it is active at the end (the truth a revert's
    status answers, REJIT-16)."""
    keys = draw(st.lists(st.tuples(st.sampled_from((0x1000, 0x2000)), st.integers(0x06000001, 0x06000008)),
                         min_size=1, max_size=4, unique=True))  # fmt: skip
    requests = sorted(api.names_with(Fact.REJIT_REQUEST))
    reverts = sorted(api.names_with(Fact.REVERTS))
    controls = function_control_methods()
    steps: list[ProtocolStep] = []
    active: dict[Key, bool] = dict.fromkeys(keys, False)
    waiting: list[Key] = []  # requested, parameters not asked yet
    prepared: list[Key] = []  # parameters given: may be compiled
    next_id = 1
    functions = {k: 0x7F0000 + 0x100 * n for n, k in enumerate(keys)}
    for _ in range(draw(st.integers(1, max_steps))):
        choice = draw(st.sampled_from(("request", "request", "revert", "runtime", "runtime", "runtime")))
        if choice == "request":
            key = draw(st.sampled_from(keys))
            callback = draw(_CALLBACKS)
            name = draw(st.sampled_from(requests))
            steps.append(ProtocolStep("request", key, name, callback, again=active[key]))
            active[key] = True
            if key not in waiting:
                waiting.append(key)
            if key in prepared:
                prepared.remove(key)
        elif choice == "revert":
            key = draw(st.sampled_from(keys))
            callback = draw(_CALLBACKS)
            steps.append(ProtocolStep("revert", key, draw(st.sampled_from(reverts)), callback))
            active[key] = False
            if key in waiting:
                waiting.remove(key)
            if key in prepared:
                prepared.remove(key)
        elif waiting and draw(st.sampled_from((True, False))):
            key = waiting.pop(0)
            if draw(st.integers(0, 5)) == 0:  # the runtime cannot honour it
                steps.append(ProtocolStep("error", key, function=functions[key]))
                active[key] = False
                continue
            steps.append(ProtocolStep("parameters", key, PARAMETERS_CALLBACK, PARAMETERS_CALLBACK))
            for name in draw(st.lists(st.sampled_from(controls), max_size=3)):
                steps.append(ProtocolStep("fc", key, name, PARAMETERS_CALLBACK, inside_parameters=True))
            steps.append(ProtocolStep("parameters_end", key))
            prepared.append(key)
            if draw(st.booleans()):  # the profiler kept the pointer and used it later
                name = draw(st.sampled_from(controls))
                steps.append(ProtocolStep("fc", key, name, draw(_CALLBACKS)))
        elif prepared:
            key = draw(st.sampled_from(prepared))
            for k in range(draw(st.integers(1, 2))):  # instantiations, each its own Started/Finished
                function = functions[key] + k
                steps.append(ProtocolStep("started", key, function=function, rejit_id=next_id))
                steps.append(ProtocolStep("finished", key, function=function, rejit_id=next_id))
            next_id += 1
    return steps, active


@st.composite
def straight_bodies(draw: st.DrawFn) -> bytes:
    """A valid method body: nops, ldc.i4.0/pop pairs, ret; tiny or fat."""
    code = bytearray()
    for _ in range(draw(st.integers(0, 40))):
        code += draw(st.sampled_from((b"\x00", b"\x16\x26")))
    code += b"\x2a"
    tiny = None if len(code) < 64 and draw(st.booleans()) else False
    return encode_body(bytes(code), max_stack=draw(st.integers(1, 16)), tiny=tiny)
