"""``python -m conformance.codegen``: rewrite every checked-in output of every emitter."""

from __future__ import annotations

import sys

from conformance.codegen import NATIVE_DIR, checked_in, write


def main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m conformance.codegen  (rewrites every checked-in generated file)",
              file=sys.stderr)
        return 2
    outputs = checked_in()
    written = write(outputs)
    for path in written:
        print(f"wrote {path.relative_to(NATIVE_DIR.parents[1])}")
    print(f"{len(outputs)} generated files, {len(written)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
