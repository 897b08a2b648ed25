"""User-facing failures.

Every failure a user can cause or meet (a missing runtime, a compile error, a corrupt trace, a crashed
scenario) is raised as :class:`HarnessError` with one line that names what went wrong and where; the CLI
prints it as ``profharness: error: <line>`` and never shows a traceback. Its exit status says whose it is:

- :class:`InputError` (exit 2): what the user gave cannot be used: a bad flag value, a missing or malformed
  file they named (a profiler, a plan, a reproducer, an expectation file, a report path), a bad CLSID, a
  runtime version nothing matches.
- any other :class:`HarnessError` (exit 3): the harness failed: a runtime that cannot be installed, a
  probe, proxy or scenario that does not build, a tool that is missing, a trace the harness's own run wrote
  that cannot be read.
"""

from __future__ import annotations

__all__ = ["EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_HARNESS", "EXIT_USAGE", "HarnessError", "InputError"]

#: exit statuses of every command (a signal adds 128 + its number: 130 for SIGINT, 143 for SIGTERM)
EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_HARNESS = 3


class HarnessError(Exception):
    """A failure with a one-line, user-facing explanation (the harness failed: exit 3)."""

    #: the command's exit status when this error ends it
    exit_code = EXIT_HARNESS

    def __init__(self, message: str) -> None:
        first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
        super().__init__(first_line)
        self.message = first_line
        #: The full text when the one-line message summarises more (e.g. compiler output).
        self.detail = message


class InputError(HarnessError):
    """What the user gave cannot be used (exit 2): the line names the flag or file and what is wrong."""

    exit_code = EXIT_USAGE
