"""The validator (issue 10): a third-party profiler run behind the recording proxy on live runtimes, its
recorded sequence checked against the rules the contract sets for profiler authors.

- :mod:`~conformance.validator.build`: the proxy library (CMake target ``profharness_proxy``), cached;
- :mod:`~conformance.validator.launch`: the input checks (ELF .so, CLSID) and a run under the proxy,
  through :func:`conformance.core.runner.execute` (watchdog, reaping, trace reading);
- :mod:`~conformance.validator.recording`: a proxy trace read into :mod:`clr_model.events`;
- :mod:`~conformance.validator.rules`: the rules, each finding naming its clause, thread, callback and
  records;
- :mod:`~conformance.validator.hooks`: the enter/leave hooks the profiler registered, read from its file
  and given to the hook checker (``profharness check-hook``, run as a child process);
- :mod:`~conformance.validator.api`: :func:`validate` for users' CI, and the reports;
- :mod:`~conformance.validator.pytest_items`: one pytest item per clause for users' CI.

The harness process never loads the profiler: only the proxy, inside the runtime's process, does (the hook
checker reads the profiler's file, in a child process).
Imports :mod:`conformance.core`, :mod:`conformance.adapters` and :mod:`clr_model` only (and pytest, in
:mod:`~conformance.validator.pytest_items`).
"""
