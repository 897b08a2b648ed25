"""Hypothesis strategies for the DoStackSnapshot model: thread models, seeds, flags, callback behaviours."""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model import stacksnapshot as dss
from clr_model.context import Arch
from clr_model.hresults import HResult

__all__ = [
    "callback_behaviours",
    "frames_kinds",
    "info_flags",
    "platforms",
    "seeds",
    "snapshot_inputs",
    "thread_models",
]

_UNMANAGED = ("native", "pinvoke", "helper")


def frames_kinds(min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[list[str]]:
    return st.lists(
        st.sampled_from(("managed", "managed", *_UNMANAGED)), min_size=min_size, max_size=max_size
    )


@st.composite
def thread_models(
    draw: st.DrawFn,
    *,
    kinds: list[str] | None = None,
    top: str | None = None,
    min_size: int = 0,
    max_size: int = 12,
    all_in_jit: bool = False,
) -> dss.ThreadModel:
    """A stack, leaf first, with distinct ips and strictly increasing sps (the stack grows down).

    ``top`` forces the kind of the leaf frame; ``kinds`` gives every frame's kind.
    """
    if kinds is None:
        kinds = draw(frames_kinds(min_size=max(min_size, 1 if top else 0), max_size=max_size))
        if top is not None:
            kinds = [top, *kinds[1:]] if kinds else [top]
    n = len(kinds)
    ips = draw(st.lists(st.integers(0x1000, 2**47), min_size=n, max_size=n, unique=True))
    gaps = draw(st.lists(st.integers(8, 4096), min_size=n, max_size=n))
    sp = draw(st.integers(0x10000, 2**46))
    pool = draw(st.lists(st.integers(1, 2**48), min_size=1, max_size=6, unique=True))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))
    not_jit = set() if all_in_jit else draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=2))
    frames: list[dss.ManagedFrame | dss.UnmanagedFrame] = []
    for i, (kind, ip, gap, pick) in enumerate(zip(kinds, ips, gaps, picks, strict=True)):
        sp += gap
        if kind == "managed":
            in_jit_code = i not in not_jit
            frames.append(dss.ManagedFrame(function_id=pool[pick], ip=ip, sp=sp, in_jit_code=in_jit_code))
        else:
            frames.append(dss.UnmanagedFrame(kind=kind, ip=ip, sp=sp))
    return dss.ThreadModel(frames=tuple(frames))


@st.composite
def seeds(draw: st.DrawFn, thread: dss.ThreadModel) -> dss.Seed | None:
    """None, a seed taken from one of the thread's frames, or an arbitrary (possibly bogus) one."""
    choices: list[st.SearchStrategy[dss.Seed | None]] = [st.none()]
    managed = [f for f in thread.frames if isinstance(f, dss.ManagedFrame)]
    if managed:
        choices.append(
            st.sampled_from(managed).map(lambda f: dss.Seed(ip=f.ip, sp=f.sp, in_managed_code=f.in_jit_code))
        )
    choices.append(st.builds(dss.Seed, ip=st.integers(0, 2**64 - 1), sp=st.integers(0, 2**64 - 1)))
    seed: dss.Seed | None = draw(st.one_of(*choices))
    return seed


def info_flags() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(0, 2**32 - 1))


def callback_behaviours(max_size: int = 8) -> st.SearchStrategy[dss.CallbackBehaviour]:
    ret = st.one_of(
        st.just(int(HResult.S_OK)),
        st.sampled_from([int(HResult.S_FALSE), int(HResult.E_FAIL)]),
    )
    return st.builds(dss.CallbackBehaviour, returns=st.lists(ret, max_size=max_size).map(tuple))


def platforms() -> st.SearchStrategy[dss.Platform]:
    return st.builds(
        dss.Platform,
        os=st.sampled_from(dss.Os),
        arch=st.sampled_from(Arch),
        context_size=st.none() | st.sampled_from([1232, 3104, 716]),
    )


@st.composite
def snapshot_inputs(
    draw: st.DrawFn,
    *,
    thread: st.SearchStrategy[dss.ThreadModel] | None = None,
    state: st.SearchStrategy[dss.ThreadState] | None = None,
    flags: st.SearchStrategy[int] | None = None,
    seeded: bool | None = None,
    platform: st.SearchStrategy[dss.Platform] | None = None,
    callback: st.SearchStrategy[dss.CallbackBehaviour] | None = None,
) -> dss.SnapshotInput:
    """Any model input; pass strategies to pin a part. ``seeded``: True/False forces a seed / none."""
    model = draw(thread if thread is not None else thread_models())
    plat = draw(platform if platform is not None else platforms())
    seed = draw(seeds(model))
    if seeded is True and seed is None:
        seed = draw(seeds(model).filter(lambda s: s is not None))
    if seeded is False:
        seed = None
    size = plat.runtime_context_size
    context_size = draw(st.one_of(st.just(size), st.just(size + 64), st.integers(0, 2**32 - 1)))
    if seed is None:
        context_size = draw(st.just(0) | st.just(context_size))
    return dss.SnapshotInput(
        thread=model,
        state=draw(state if state is not None else st.sampled_from(dss.ThreadState)),
        info_flags=draw(flags if flags is not None else info_flags()),
        seed=seed,
        context_size=context_size,
        client_data=draw(st.integers(0, 2**64 - 1)),
        platform=plat,
        callback=draw(callback if callback is not None else callback_behaviours()),
    )
