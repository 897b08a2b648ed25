"""Replay every committed capture and write (or compare) the JSON of each result: the check that a change
to the replay's speed changes none of its results (issue 23, part 5).

    python tests/emu/replay_identity.py dump OUT.json [--root CHECKOUT]
    python tests/emu/replay_identity.py compare BEFORE.json AFTER.json

``dump`` replays each ``*.phcap`` under tests/data/captures of ``--root`` (default: this checkout, whose
``emu`` package it imports) four ways: with and without disk access, to 64 and to 1024 frames; first
cold (every cache emptied), then warm (the same capture object again, twice, and once more by
``replay_light(...).to_model()`` where the checkout has it); the warm JSON must equal the cold one.
``compare`` says which results differ between two dumps (exit status 1 if any does). To check a change,
dump with a checkout of the commit before it (``git archive REV | tar -x -C DIR``) and with this one, then
compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def dump(root: Path) -> dict[str, str]:
    sys.path.insert(0, str(root))
    import emu.replay
    from emu import cfi
    from emu.capture import read_capture
    from emu.errors import EmuError
    from emu.replay import replay

    # the light path (where the checkout has one) must give the same result through its to_model()
    light = getattr(emu.replay, "replay_light", None)

    out: dict[str, str] = {}
    data = root / "tests" / "data" / "captures"
    for path in sorted(data.rglob("*.phcap")):
        for allow_disk in (False, True):
            for max_frames in (64, 1024):
                key = f"{path.relative_to(data)} disk={allow_disk} frames={max_frames}"
                cfi.clear_caches()
                cap = read_capture(path)
                try:
                    cold = replay(cap, allow_disk=allow_disk, max_frames=max_frames).model_dump_json()
                    warm = [replay(cap, allow_disk=allow_disk, max_frames=max_frames).model_dump_json()
                            for _ in range(2)]
                    if light is not None:
                        warm.append(light(cap, allow_disk=allow_disk, max_frames=max_frames).to_model()
                                    .model_dump_json())  # fmt: skip
                except EmuError as exc:
                    cold, warm = f"error: {exc}", []
                if any(w != cold for w in warm):
                    raise SystemExit(f"{key}: a warm replay differs from the cold one")
                out[key] = cold
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--root", type=Path, default=HERE.parents[1])
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        results = dump(args.root.resolve())
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"{len(results)} replays of {len(results) // 4} captures written to {args.out}")
        return 0
    before = json.loads(args.before.read_text())
    after = json.loads(args.after.read_text())
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for k in differ:
        print(f"DIFFERS: {k}")
    same = len(before.keys() & after.keys()) - len([k for k in differ if k in before and k in after])
    print(f"{same} of {len(before)} replays byte-identical; {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
