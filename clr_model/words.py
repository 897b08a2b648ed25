"""Machine words as pydantic fields, defined once for every layer: unsigned integers of a fixed width (an
address, a FunctionID, a register, a HRESULT read as unsigned), and the frozen, closed model configuration the
recorded facts use."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

__all__ = ["FROZEN", "U16", "U32", "U64"]

U16 = Annotated[int, Field(ge=0, lt=2**16)]
U32 = Annotated[int, Field(ge=0, lt=2**32)]
U64 = Annotated[int, Field(ge=0, lt=2**64)]
#: a recorded fact: immutable, and no field the model does not name
FROZEN = ConfigDict(frozen=True, extra="forbid")
