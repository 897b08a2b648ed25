"""The validator (issue 10): a third-party profiler run behind the recording proxy on live runtimes, its
recorded sequence checked against the rules the contract sets for profiler authors.

- :mod:`~conformance.validator.build`: the proxy library (CMake target ``profharness_proxy``), cached;
- :mod:`~conformance.validator.launch`: the input checks (ELF .so, CLSID) and a run under the proxy,
  through :func:`conformance.core.runner.execute` (watchdog, reaping, trace reading);
- :mod:`~conformance.validator.recording`: a proxy trace read into :mod:`clr_model.events`;
- :mod:`~conformance.validator.rules`: the rules, each finding naming its clause, thread, callback and
  records;
- :mod:`~conformance.validator.api`: :func:`validate` for users' CI, and the reports.

The harness process never loads the profiler: only the proxy, inside the runtime's process, does.
Imports :mod:`conformance.core`, :mod:`conformance.adapters` and :mod:`clr_model` only.
"""
