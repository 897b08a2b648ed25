"""The validator (issue 10): a third-party profiler run behind the recording proxy on live runtimes, its
recorded sequence checked against the rules the contract sets for profiler authors.

- :mod:`~conformance.validator.build`: the proxy library (CMake target ``profharness_proxy``), cached;
- :mod:`~conformance.validator.launch`: the input checks (ELF .so, CLSID, ``--env``, ``--preload``) and a run
  under the proxy, through :func:`conformance.core.runner.execute` (watchdog, reaping, trace reading);
- :mod:`~conformance.validator.stream`: one pass over the proxy's trace, bounded memory, every rule fed the
  records it reads;
- :mod:`~conformance.validator.recording`: a proxy trace read into :mod:`clr_model.events`;
- :mod:`~conformance.validator.rules`: the rules, each finding naming its clause, thread, callback, records
  and site;
- :mod:`~conformance.validator.hooks`: the enter/leave hooks the profiler registered, read from its file
  and given to the hook checker (:func:`emu.hookcheck.check_hook`, in-process: ``profharness check-hook``'s
  checker);
- :mod:`~conformance.validator.groups`, :mod:`~conformance.validator.result`: findings grouped by clause and
  call site, clause statuses, :class:`~conformance.validator.result.ValidationResult`;
- :mod:`~conformance.validator.report`: terminal, JSON (and its schema), JUnit and HTML;
- :mod:`~conformance.validator.api`: :func:`validate` for users' code and CI, and the reports;
- :mod:`~conformance.validator.pytest_items`: one pytest item per clause for users' CI;
- :mod:`~conformance.validator.skeleton`: the skeleton profiler project (``profharness skeleton DIR``).

The harness process never loads the profiler: only the proxy, inside the runtime's process, does (the hook
checker reads the profiler's file and runs the hook's code under unicorn).
Imports :mod:`conformance.core`, :mod:`conformance.codegen` (the skeleton's generated headers),
:mod:`emu.hookcheck` and :mod:`clr_model`, never the suite, the checks or the CLI (and pytest, in
:mod:`~conformance.validator.pytest_items`).
"""
