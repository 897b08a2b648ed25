"""What the IL checker needs of a module's metadata, and an assembly reader that supplies it.

The checker asks a :class:`MetadataResolver` (a Protocol: the caller supplies one) whether a token names a
row, and for the call signatures and local counts that stack simulation needs. :class:`Assembly` is the
resolver of a .NET assembly read from its bytes (ECMA-335 Partition II §24: the CLI header, the metadata
root, the ``#~`` tables, the ``#Blob`` and ``#US`` heaps, and §23.2 signatures); the proxy's recorded
metadata is another.

The reader parses only the table layout (row counts and row sizes, read once) and the few columns asked
for, so a large assembly (System.Private.CoreLib) opens in milliseconds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from clr_model.errors import ModelError

__all__ = [
    "TABLE_NAMES",
    "Assembly",
    "CallSignature",
    "MetadataError",
    "MetadataResolver",
    "RecordedMetadata",
    "local_count",
    "method_signature",
]


_USER_STRING = 0x70  # the token "table" of a #US heap offset


class MetadataError(ModelError):
    """Bytes that are not a readable .NET assembly, or a signature blob that cannot be read."""


@dataclass(frozen=True)
class CallSignature:
    """What stack simulation needs of a method signature (Partition II §23.2.1-3): its parameter count
    (ParamCount: for a call site of a vararg method, the extra arguments included), whether an instance
    pointer is passed (HASTHIS) outside the parameter list (not EXPLICITTHIS), and whether it returns a
    value (a return type other than VOID)."""

    params: int
    has_this: bool = False
    explicit_this: bool = False
    returns_value: bool = False

    @property
    def stack_args(self) -> int:
        """Stack items a call pops for its arguments (``this`` included; not calli's function pointer)."""
        return self.params + (1 if self.has_this and not self.explicit_this else 0)


class MetadataResolver(Protocol):
    """The module's metadata as the checker asks it."""

    def token_exists(self, token: int) -> bool:
        """Whether ``token`` names a row of its table (or, for ``0x70``, an offset in the #US heap)."""
        ...

    def method_signature(self, token: int) -> CallSignature | None:
        """The signature of a MethodDef, a method MemberRef, a MethodSpec's method, or (StandAloneSig) a
        calli site; None when the token names none."""
        ...

    def local_count(self, token: int) -> int | None:
        """How many locals the StandAloneSig ``token``'s LOCAL_SIG declares; None when it is none."""
        ...


@dataclass(frozen=True)
class RecordedMetadata:
    """A resolver over explicit facts, the shape of what a recording holds: the row count of each table,
    the #US heap's size, the method signature of each method (or calli StandAloneSig) token, the local
    count of each local StandAloneSig token."""

    rows: Mapping[int, int] = field(default_factory=dict)
    user_strings: int = 0
    signatures: Mapping[int, CallSignature] = field(default_factory=dict)
    locals: Mapping[int, int] = field(default_factory=dict)

    def token_exists(self, token: int) -> bool:
        table, row = token >> 24, token & 0xFFFFFF
        if table == _USER_STRING:
            return row < self.user_strings
        return 1 <= row <= self.rows.get(table, 0)

    def method_signature(self, token: int) -> CallSignature | None:
        return self.signatures.get(token) if self.token_exists(token) else None

    def local_count(self, token: int) -> int | None:
        return self.locals.get(token) if self.token_exists(token) else None


# ---- signatures (Partition II §23.2) -------------------------------------------------------------------

_HASTHIS, _EXPLICITTHIS, _GENERIC = 0x20, 0x40, 0x10
_FIELD, _LOCAL_SIG, _PROPERTY = 0x06, 0x07, 0x08
_ELEMENT_VOID, _CMOD_REQD, _CMOD_OPT = 0x01, 0x1F, 0x20


def _compressed(blob: bytes, pos: int) -> tuple[int, int]:
    """The compressed unsigned integer at ``pos`` (§23.2) and the position after it."""
    if pos >= len(blob):
        raise MetadataError("signature ends inside a compressed integer")
    first = blob[pos]
    if first & 0x80 == 0:
        return first, pos + 1
    if first & 0xC0 == 0x80:
        if pos + 2 > len(blob):
            raise MetadataError("signature ends inside a compressed integer")
        return ((first & 0x3F) << 8) | blob[pos + 1], pos + 2
    if first & 0xE0 == 0xC0:
        if pos + 4 > len(blob):
            raise MetadataError("signature ends inside a compressed integer")
        return int.from_bytes(blob[pos:pos + 4], "big") & 0x1FFFFFFF, pos + 4
    raise MetadataError(f"bad compressed integer lead byte 0x{first:02X}")


def method_signature(blob: bytes) -> CallSignature | None:
    """The call facts of a MethodDefSig / MethodRefSig / StandAloneMethodSig; None for a field, local or
    property signature."""
    if not blob:
        raise MetadataError("empty signature")
    convention = blob[0]
    if convention & 0x0F in (_FIELD, _LOCAL_SIG, _PROPERTY):
        return None
    pos = 1
    if convention & _GENERIC:
        _, pos = _compressed(blob, pos)
    params, pos = _compressed(blob, pos)
    while pos < len(blob) and blob[pos] in (_CMOD_REQD, _CMOD_OPT):  # custom modifiers of the return type
        _, pos = _compressed(blob, pos + 1)
    if pos >= len(blob):
        raise MetadataError("method signature without a return type")
    return CallSignature(params, bool(convention & _HASTHIS), bool(convention & _EXPLICITTHIS),
                         blob[pos] != _ELEMENT_VOID)


def local_count(blob: bytes) -> int | None:
    """The Count of a LocalVarSig (§23.2.6); None when the blob is not one."""
    if not blob or blob[0] != _LOCAL_SIG:
        return None
    return _compressed(blob, 1)[0]


# ---- the metadata tables (Partition II §22, §24.2.6) ---------------------------------------------------

#: table number -> name, every table ECMA-335 defines.
TABLE_NAMES: dict[int, str] = {
    0x00: "Module", 0x01: "TypeRef", 0x02: "TypeDef", 0x03: "FieldPtr", 0x04: "Field", 0x05: "MethodPtr",
    0x06: "MethodDef", 0x07: "ParamPtr", 0x08: "Param", 0x09: "InterfaceImpl", 0x0A: "MemberRef",
    0x0B: "Constant", 0x0C: "CustomAttribute", 0x0D: "FieldMarshal", 0x0E: "DeclSecurity",
    0x0F: "ClassLayout", 0x10: "FieldLayout", 0x11: "StandAloneSig", 0x12: "EventMap", 0x13: "EventPtr",
    0x14: "Event", 0x15: "PropertyMap", 0x16: "PropertyPtr", 0x17: "Property", 0x18: "MethodSemantics",
    0x19: "MethodImpl", 0x1A: "ModuleRef", 0x1B: "TypeSpec", 0x1C: "ImplMap", 0x1D: "FieldRVA",
    0x1E: "EncLog", 0x1F: "EncMap", 0x20: "Assembly", 0x21: "AssemblyProcessor", 0x22: "AssemblyOS",
    0x23: "AssemblyRef", 0x24: "AssemblyRefProcessor", 0x25: "AssemblyRefOS", 0x26: "File",
    0x27: "ExportedType", 0x28: "ManifestResource", 0x29: "NestedClass", 0x2A: "GenericParam",
    0x2B: "MethodSpec", 0x2C: "GenericParamConstraint",
}

# coded index -> (tag bits, tables by tag; None for an unused tag)
_CODED: dict[str, tuple[int, tuple[int | None, ...]]] = {
    "TypeDefOrRef": (2, (0x02, 0x01, 0x1B)),
    "HasConstant": (2, (0x04, 0x08, 0x17)),
    "HasCustomAttribute": (5, (0x06, 0x04, 0x01, 0x02, 0x08, 0x09, 0x0A, 0x00, 0x0E, 0x17, 0x14, 0x11, 0x1A,
                               0x1B, 0x20, 0x23, 0x26, 0x27, 0x28, 0x2A, 0x2C, 0x2B)),
    "HasFieldMarshal": (1, (0x04, 0x08)),
    "HasDeclSecurity": (2, (0x02, 0x06, 0x20)),
    "MemberRefParent": (3, (0x02, 0x01, 0x1A, 0x06, 0x1B)),
    "HasSemantics": (1, (0x14, 0x17)),
    "MethodDefOrRef": (1, (0x06, 0x0A)),
    "MemberForwarded": (1, (0x04, 0x06)),
    "Implementation": (2, (0x26, 0x23, 0x27)),
    "CustomAttributeType": (3, (None, None, 0x06, 0x0A, None)),
    "ResolutionScope": (2, (0x00, 0x1A, 0x23, 0x01)),
    "TypeOrMethodDef": (1, (0x02, 0x06)),
}

# table -> its columns: "2"/"4" fixed-size, "S"/"G"/"B" heap indexes, "T:xx" a table index, else coded.
_COLUMNS: dict[int, tuple[str, ...]] = {
    0x00: ("2", "S", "G", "G", "G"),
    0x01: ("ResolutionScope", "S", "S"),
    0x02: ("4", "S", "S", "TypeDefOrRef", "T:04", "T:06"),
    0x03: ("T:04",),
    0x04: ("2", "S", "B"),
    0x05: ("T:06",),
    0x06: ("4", "2", "2", "S", "B", "T:08"),
    0x07: ("T:08",),
    0x08: ("2", "2", "S"),
    0x09: ("T:02", "TypeDefOrRef"),
    0x0A: ("MemberRefParent", "S", "B"),
    0x0B: ("2", "HasConstant", "B"),
    0x0C: ("HasCustomAttribute", "CustomAttributeType", "B"),
    0x0D: ("HasFieldMarshal", "B"),
    0x0E: ("2", "HasDeclSecurity", "B"),
    0x0F: ("2", "4", "T:02"),
    0x10: ("4", "T:04"),
    0x11: ("B",),
    0x12: ("T:02", "T:14"),
    0x13: ("T:14",),
    0x14: ("2", "S", "TypeDefOrRef"),
    0x15: ("T:02", "T:17"),
    0x16: ("T:17",),
    0x17: ("2", "S", "B"),
    0x18: ("2", "T:06", "HasSemantics"),
    0x19: ("T:02", "MethodDefOrRef", "MethodDefOrRef"),
    0x1A: ("S",),
    0x1B: ("B",),
    0x1C: ("2", "MemberForwarded", "S", "T:1A"),
    0x1D: ("4", "T:04"),
    0x1E: ("4", "4"),
    0x1F: ("4",),
    0x20: ("4", "2", "2", "2", "2", "4", "B", "S", "S"),
    0x21: ("4",),
    0x22: ("4", "4", "4"),
    0x23: ("2", "2", "2", "2", "4", "B", "S", "S", "B"),
    0x24: ("4", "T:23"),
    0x25: ("4", "4", "4", "T:23"),
    0x26: ("4", "S", "B"),
    0x27: ("4", "4", "S", "S", "Implementation"),
    0x28: ("4", "4", "S", "Implementation"),
    0x29: ("T:02", "T:02"),
    0x2A: ("2", "2", "TypeOrMethodDef", "S"),
    0x2B: ("MethodDefOrRef", "B"),
    0x2C: ("T:2A", "TypeDefOrRef"),
}

_IL_CODE_TYPE, _CODE_TYPE_MASK = 0x0000, 0x0003


@dataclass(frozen=True)
class _Table:
    offset: int  # file offset of row 1
    rows: int
    row_size: int
    columns: tuple[tuple[int, int], ...]  # (offset in row, size) per column


class Assembly:
    """A .NET assembly's metadata and method bodies, read from the file's bytes. Implements
    :class:`MetadataResolver`. Bytes that are not an assembly raise one :class:`MetadataError`."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        try:
            self._read()
        except (struct.error, IndexError, ValueError) as exc:
            raise MetadataError(f"not a readable .NET assembly ({exc})") from None
        self._signatures: dict[int, CallSignature | None] = {}

    # -- layout -----------------------------------------------------------------------------------------
    def _u16(self, at: int) -> int:
        return int(struct.unpack_from("<H", self.data, at)[0])

    def _u32(self, at: int) -> int:
        return int(struct.unpack_from("<I", self.data, at)[0])

    def _read(self) -> None:
        data = self.data
        if data[:2] != b"MZ":
            raise MetadataError("not a PE file (no MZ signature)")
        pe = self._u32(0x3C)
        if data[pe:pe + 4] != b"PE\0\0":
            raise MetadataError("not a PE file (no PE signature)")
        coff = pe + 4
        sections, optional_size = self._u16(coff + 2), self._u16(coff + 16)
        optional = coff + 20
        magic = self._u16(optional)
        directories = optional + (96 if magic == 0x10B else 112)
        self._sections = [
            (self._u32(at + 12), max(self._u32(at + 8), self._u32(at + 16)), self._u32(at + 20),
             self._u32(at + 16))
            for at in range(optional + optional_size, optional + optional_size + 40 * sections, 40)
        ]
        cli_rva = self._u32(directories + 14 * 8)
        if cli_rva == 0:
            raise MetadataError("a PE file with no CLI header (not a .NET assembly)")
        cli = self.file_offset(cli_rva)
        root = self.file_offset(self._u32(cli + 8))
        if self._u32(root) != 0x424A5342:
            raise MetadataError("bad metadata root signature")
        version_length = self._u32(root + 12)
        count = self._u16(root + 16 + version_length + 2)
        at = root + 16 + version_length + 4
        streams: dict[str, tuple[int, int]] = {}
        for _ in range(count):
            offset, size = self._u32(at), self._u32(at + 4)
            end = data.index(b"\0", at + 8)
            streams[data[at + 8:end].decode("ascii")] = (root + offset, size)
            at = (end + 4) & ~3
        tables = streams.get("#~") or streams.get("#-")
        if tables is None:
            raise MetadataError("metadata without a #~ tables stream")
        self._blob = streams.get("#Blob", (0, 0))
        self._strings = streams.get("#Strings", (0, 0))
        self._user_strings = streams.get("#US", (0, 0))
        self._read_tables(tables[0])

    def _read_tables(self, at: int) -> None:
        heaps = self.data[at + 6]
        valid = int(struct.unpack_from("<Q", self.data, at + 8)[0])
        at += 24
        counts: dict[int, int] = {}
        for number in range(64):
            if valid >> number & 1:
                counts[number] = self._u32(at)
                at += 4
        if heaps & 0x40:
            at += 4  # an extra data word some writers emit (not in ECMA-335)
        self._counts = counts
        sizes = {"2": 2, "4": 4, "S": 4 if heaps & 1 else 2, "G": 4 if heaps & 2 else 2,
                 "B": 4 if heaps & 4 else 2}

        def width(column: str) -> int:
            if column in sizes:
                return sizes[column]
            if column.startswith("T:"):
                return 2 if counts.get(int(column[2:], 16), 0) < 1 << 16 else 4
            bits, targets = _CODED[column]
            largest = max(counts.get(t, 0) for t in targets if t is not None)
            return 2 if largest < 1 << (16 - bits) else 4

        self._tables: dict[int, _Table] = {}
        for number, rows in counts.items():
            if number not in _COLUMNS:
                raise MetadataError(f"metadata table 0x{number:02X} is not an ECMA-335 table")
            layout, offset = [], 0
            for column in _COLUMNS[number]:
                layout.append((offset, width(column)))
                offset += layout[-1][1]
            self._tables[number] = _Table(at, rows, offset, tuple(layout))
            at += rows * offset
        if at > len(self.data):
            raise MetadataError(f"the metadata tables run past the end of the file ({at} > {len(self.data)})")

    def file_offset(self, rva: int) -> int:
        """The file offset of the relative virtual address ``rva``."""
        for start, size, raw, _ in self._sections:
            if start <= rva < start + size:
                return rva - start + raw
        raise MetadataError(f"RVA 0x{rva:X} lies in no section")

    def section_end(self, rva: int) -> int:
        """The file offset where the raw data of ``rva``'s section ends."""
        for start, size, raw, raw_size in self._sections:
            if start <= rva < start + size:
                return min(raw + raw_size, len(self.data))
        raise MetadataError(f"RVA 0x{rva:X} lies in no section")

    def cell(self, table: int, row: int, column: int) -> int:
        """The raw value of ``column`` in ``row`` (1-based) of ``table``."""
        layout = self._tables[table]
        offset, size = layout.columns[column]
        at = layout.offset + (row - 1) * layout.row_size + offset
        return self._u16(at) if size == 2 else self._u32(at)

    def rows(self, table: int) -> int:
        """How many rows ``table`` has (0 when absent)."""
        return self._counts.get(table, 0)

    @property
    def user_strings_size(self) -> int:
        """The size in bytes of the #US heap on disk (a ``0x70`` token's offset is below it)."""
        return self._user_strings[1]

    def blob(self, index: int) -> bytes:
        """The #Blob heap item at ``index``."""
        start, size = self._blob
        if index >= size:
            raise MetadataError(f"blob index 0x{index:X} beyond the #Blob heap")
        length, at = _compressed(self.data, start + index)
        return self.data[at:at + length]

    def string(self, index: int) -> str:
        """The #Strings heap item at ``index`` (UTF-8, up to its NUL)."""
        start, size = self._strings
        if index >= size:
            raise MetadataError(f"string index 0x{index:X} beyond the #Strings heap")
        end = self.data.find(b"\0", start + index, start + size)
        return self.data[start + index:end if end >= 0 else start + size].decode("utf-8", "replace")

    def method_name(self, token: int) -> str | None:
        """``Namespace.Type.Method`` of a methodDef token (the type: the TypeDef whose method list holds the
        row), None when the token names no MethodDef row."""
        row = token & 0xFFFFFF
        if token >> 24 != 0x06 or not 1 <= row <= self.rows(0x06):
            return None
        try:
            method = self.string(self.cell(0x06, row, 3))
            owner = 0
            for type_row in range(1, self.rows(0x02) + 1):
                if self.cell(0x02, type_row, 5) <= row:
                    owner = type_row
                else:
                    break
            if not owner:
                return method
            namespace, name = self.string(self.cell(0x02, owner, 2)), self.string(self.cell(0x02, owner, 1))
        except MetadataError:
            return None
        return ".".join(part for part in (namespace, name, method) if part)

    # -- method bodies ----------------------------------------------------------------------------------
    def method_bodies(self) -> Iterator[tuple[int, memoryview]]:
        """``(methodDef token, the image from the body's first byte to its section's end)`` of every
        method with an IL body (an RVA and code type IL), in token order."""
        image = memoryview(self.data)
        for row in range(1, self.rows(0x06) + 1):
            rva = self.cell(0x06, row, 0)
            if rva and self.cell(0x06, row, 1) & _CODE_TYPE_MASK == _IL_CODE_TYPE:
                yield 0x06000000 | row, image[self.file_offset(rva):self.section_end(rva)]

    # -- MetadataResolver -------------------------------------------------------------------------------
    def token_exists(self, token: int) -> bool:
        table, row = token >> 24, token & 0xFFFFFF
        if table == _USER_STRING:
            return row < self._user_strings[1]
        return 1 <= row <= self.rows(table)

    def method_signature(self, token: int) -> CallSignature | None:
        if token in self._signatures:
            return self._signatures[token]
        found = self._method_signature(token) if self.token_exists(token) else None
        self._signatures[token] = found
        return found

    def _method_signature(self, token: int) -> CallSignature | None:
        table, row = token >> 24, token & 0xFFFFFF
        try:
            if table == 0x06:
                return method_signature(self.blob(self.cell(0x06, row, 4)))
            if table == 0x0A:
                return method_signature(self.blob(self.cell(0x0A, row, 2)))
            if table == 0x11:
                return method_signature(self.blob(self.cell(0x11, row, 0)))
            if table == 0x2B:
                coded = self.cell(0x2B, row, 0)
                inner = (0x06 if coded & 1 == 0 else 0x0A) << 24 | coded >> 1
                return self.method_signature(inner) if inner >> 24 != 0x2B else None
        except MetadataError:
            return None
        return None

    def local_count(self, token: int) -> int | None:
        if token >> 24 != 0x11 or not self.token_exists(token):
            return None
        try:
            return local_count(self.blob(self.cell(0x11, token & 0xFFFFFF, 0)))
        except MetadataError:
            return None
