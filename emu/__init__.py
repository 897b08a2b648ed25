"""emu: capture the instant of an asynchronous stack walk and replay it deterministically under unicorn.

- :mod:`emu.capture`: the capture file (versioned manifest + compressed memory segments; JSON Schema)
- :mod:`emu.memory`: which bytes a capture holds (the seam between a capture and any backend)
- :mod:`emu.machine`: the unicorn backend (lazy pages, budgets, hook errors raised after the run)
- :mod:`emu.cfi`: ``.eh_frame`` CFI with pyelftools, one CFI step
- :mod:`emu.unwind`: the unwinder (context, CFI, frame pointer, emulation, scan)
- :mod:`emu.replay`: seed (DSS-19), the DoStackSnapshot model's callbacks, text, recovery table
- :mod:`emu.procfs`: capture a stopped native process through /proc (tests, tools)
"""
