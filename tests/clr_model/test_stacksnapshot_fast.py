"""The model's callbacks built without validation (issue 23, part 5) are the ones validation builds.

:func:`clr_model.stacksnapshot.snapshot` builds each delivered :class:`Callback` (and its
:class:`FrameContext`) from the validated input without running pydantic's validation again; these tests
hold every callback of every outcome equal to the one validation gives for the same values (fields, field
order, the fields set, JSON), and hold an input whose values are not of the fields' types (a
``model_construct``'ed one) to the validation error it always gave.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from pydantic import BaseModel, ValidationError

from clr_model.errors import InvalidInput
from clr_model.stacksnapshot import (
    COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    Callback,
    FrameContext,
    ManagedFrame,
    SnapshotInput,
    ThreadModel,
    ThreadState,
    UnmanagedFrame,
    snapshot,
)
from clr_model.strategies.stacks import snapshot_inputs


def same(a: BaseModel, b: BaseModel) -> None:
    assert type(a) is type(b)
    assert a == b
    assert list(a.__dict__) == list(b.__dict__) == list(type(a).model_fields)
    assert a.model_fields_set == b.model_fields_set
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump() == b.model_dump()


def validated(c: Callback) -> Callback:
    """The callback validation builds from ``c``'s values, given as _deliver gives them."""
    return Callback(
        func_id=c.func_id, ip=c.ip, client_data=c.client_data, context_size=c.context_size,
        context=FrameContext(ip=c.context.ip, sp=c.context.sp) if c.context is not None else None,
        hr=c.hr, clauses=c.clauses,
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(snapshot_inputs())
def test_DSS_03_delivered_callbacks_equal_validated_ones(inp: SnapshotInput) -> None:
    try:
        snap = snapshot(inp)
    except InvalidInput:
        return  # DSS-12 / DSS-08 inputs: no walk
    for alt in snap.alternatives:
        for c in alt.callbacks:
            same(c, validated(c))
            if c.context is not None:
                same(c.context, FrameContext(ip=c.context.ip, sp=c.context.sp))
            # a copy with an update gets a set of its own: the instance's is never changed
            before = set(c.model_fields_set)
            copy = c.model_copy(update={"ip": 1})
            assert c.model_fields_set == before and copy.ip == 1
            same(copy, validated(c).model_copy(update={"ip": 1}))


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_DSS_03_a_constructed_frame_out_of_range_still_fails_validation(bad: int) -> None:
    frames = (ManagedFrame.model_construct(function_id=7, ip=bad, sp=0x1000),)
    inp = SnapshotInput(
        thread=ThreadModel.model_construct(frames=frames), state=ThreadState.CURRENT_IN_CALLBACK,
        info_flags=COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    )  # fmt: skip
    with pytest.raises(ValidationError):
        snapshot(inp)


def test_DSS_04_a_constructed_client_data_out_of_range_still_fails_validation() -> None:
    thread = ThreadModel(frames=(UnmanagedFrame(kind="native", ip=0x10, sp=0x20),
                                 ManagedFrame(function_id=7, ip=0x30, sp=0x40)))  # fmt: skip
    inp = SnapshotInput.model_construct(
        thread=thread, state=ThreadState.CURRENT_IN_CALLBACK, info_flags=0, seed=None, context_size=0,
        client_data=2**64, platform=SnapshotInput.model_fields["platform"].default,
        callback=SnapshotInput.model_fields["callback"].default,
    )  # fmt: skip
    with pytest.raises(ValidationError):
        snapshot(inp)
