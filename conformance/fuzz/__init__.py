"""Fuzz a profiler without a runtime (issue 11): a fake runtime process answers the profiler from a world
the model computes, hypothesis chooses the events (one byte string per example read by a small
interpreter, or a rule-based state machine over the same rules), the validator's rules judge the
recording, and a failure is shrunk and saved as a reproducer that replays deterministically.

- :mod:`.child`: the fake runtime process (``conformance/native/fakeruntime``), reused across examples,
  restarted after a crash or a hang (or, for a profiler with process-wide state, new for every example);
- :mod:`.world`: the world the fuzzer invents (modules, classes, functions, threads, stacks, the heap) and
  the commands that tell the fake runtime about it;
- :mod:`.program`: the rules (the events a runtime may deliver, with the model's ordering as
  preconditions) and the interpreter that reads an example's bytes as steps;
- :mod:`.judge`: the validator's rules over one example's recording, and the model's own checks;
- :mod:`.machine`: the engines, the fuzzing session, shrinking and the replay of reproducers;
- :mod:`.database`: where hypothesis stores (under the harness cache; the example database a folder or a
  Redis server several machines share);
- :mod:`.probe`: the harness's own probe as a fuzz target;
- :mod:`.names`: the names the world draws besides invented ones (the profiler's own strings, the
  metadata of ``--app``'s assembly).
"""
