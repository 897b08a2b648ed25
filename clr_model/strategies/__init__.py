"""Hypothesis strategies for every model input, public as ``clr_model.strategies``.

Each area keeps its strategies beside the types they generate (one submodule per model module); this package
re-exports them, so ``from clr_model.strategies import valid_tables`` and
``clr_model.strategies.moved_refs.valid_tables`` are the same object.
"""

from __future__ import annotations

from clr_model.strategies import buffers, context, events, function_enter, moved_refs, rejit, stacks
from clr_model.strategies.buffers import (
    GrowingImpl,
    ModelImpl,
    RuntimeLikeImpl,
    any_requests,
    growing_impls,
    observed_calls,
    requests,
    sizes_around,
    string_requests,
    strings,
)
from clr_model.strategies.context import (
    context_buffers,
    context_sizes,
    context_values,
    layouts,
    scalar_fields,
)
from clr_model.strategies.events import (
    AREAS,
    UNSAFE_CLAUSES,
    any_events,
    area_sequences,
    mixed_sequences,
    safe_sequences,
    unsafe_sequences,
)
from clr_model.strategies.function_enter import (
    arguments,
    conforming_returns,
    entry_states,
    hook_event_sequences,
    machine_states,
)
from clr_model.strategies.moved_refs import (
    Arrays,
    gc_event_sequences,
    invalid_tables,
    object_ids_for,
    valid_tables,
)
from clr_model.strategies.rejit import ProtocolStep, protocol_runs, straight_bodies
from clr_model.strategies.stacks import (
    callback_behaviours,
    frames_kinds,
    info_flags,
    platforms,
    seeds,
    snapshot_inputs,
    thread_models,
)

__all__ = [
    "AREAS",
    "UNSAFE_CLAUSES",
    "Arrays",
    "GrowingImpl",
    "ModelImpl",
    "ProtocolStep",
    "RuntimeLikeImpl",
    "any_events",
    "any_requests",
    "area_sequences",
    "arguments",
    "buffers",
    "callback_behaviours",
    "conforming_returns",
    "context",
    "context_buffers",
    "context_sizes",
    "context_values",
    "entry_states",
    "events",
    "frames_kinds",
    "function_enter",
    "gc_event_sequences",
    "growing_impls",
    "hook_event_sequences",
    "info_flags",
    "invalid_tables",
    "layouts",
    "machine_states",
    "mixed_sequences",
    "moved_refs",
    "object_ids_for",
    "observed_calls",
    "platforms",
    "protocol_runs",
    "rejit",
    "requests",
    "safe_sequences",
    "scalar_fields",
    "seeds",
    "sizes_around",
    "snapshot_inputs",
    "stacks",
    "straight_bodies",
    "string_requests",
    "strings",
    "thread_models",
    "unsafe_sequences",
    "valid_tables",
]
