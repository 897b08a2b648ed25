"""User-facing failures.

Every failure a user can cause or meet (a missing runtime, a compile error, a corrupt trace, a crashed
scenario) is raised as :class:`HarnessError` with one line that names what went wrong and where.
The CLI prints it as ``profharness: error: <line>`` and exits 2; it never shows a traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """A failure with a one-line, user-facing explanation."""

    def __init__(self, message: str) -> None:
        first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
        super().__init__(first_line)
        self.message = first_line
        #: The full text when the one-line message summarises more (e.g. compiler output).
        self.detail = message
