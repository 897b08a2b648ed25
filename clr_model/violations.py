"""Violation: one way an observed behaviour breaks a clause. Every checker of the model returns these."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Violation(BaseModel):
    """The clause broken, a one-line message, and where (event, callback, call or range index)."""

    model_config = ConfigDict(frozen=True)

    clause: str = Field(pattern=r"^(DSS|FE2|MR2|BUF)-\d{2}$")
    message: str
    index: int | None = Field(default=None, description="position in the input")

    def __str__(self) -> str:
        where = f" at #{self.index}" if self.index is not None else ""
        return f"{self.clause}{where}: {self.message}"
