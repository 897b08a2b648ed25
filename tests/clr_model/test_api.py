"""clr_model.api: the one table of the profiling API (interfaces, signatures, versions) and its queries."""

from __future__ import annotations

import pytest

from clr_model import api
from clr_model.errors import InvalidInput


def test_callbacks_and_info_methods_come_in_vtable_order_with_their_interface_and_version() -> None:
    cbs = api.callbacks()
    assert cbs[0].name == "Initialize" and cbs[0].interface == "ICorProfilerCallback" and cbs[0].version == 1
    assert cbs[-1].name == "LoadAsNotificationOnly" and cbs[-1].version == 11
    info = api.info_methods()
    assert info[0].name == "GetClassFromObject" and info[0].family == api.INFO
    snapshot = api.method("DoStackSnapshot")
    assert (snapshot.interface, snapshot.version) == ("ICorProfilerInfo2", 2)
    assert [p.name for p in snapshot.params] == ["thread", "callback", "infoFlags", "clientData", "context",
                                                 "contextSize"]
    assert snapshot.signature.startswith("ThreadID thread, StackSnapshotCallback* callback, ")
    assert api.method("MovedReferences2").version == 4
    assert {m.family for m in cbs} == {api.CALLBACK} and len(cbs) == 95
    assert all(m.family == api.INFO for m in info)


def test_interfaces_other_than_the_two_families_have_no_version() -> None:
    unknown = api.interface("IUnknown")
    assert unknown.base is None and unknown.family is None and unknown.version == 0
    assert api.interface("ICorProfilerInfo14").base == "ICorProfilerInfo13"
    assert api.method("GetTypeDefProps").family is None


def test_an_unknown_name_is_one_line() -> None:
    with pytest.raises(InvalidInput, match="'NoSuchMethod' is no method of the profiling API table"):
        api.method("NoSuchMethod")
    with pytest.raises(InvalidInput, match="'INope' is no interface"):
        api.interface("INope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("HRESULT Lonely()\n", r"t\.txt:1: cannot parse 'HRESULT Lonely\(\)'"),
        ("interface I : - 00000000-0000-0000-C000-000000000046\nHRESULT M(int)\n",
         r"t\.txt:2: parameter 'int' needs a type and a name"),
        ("interface I : J 00000000-0000-0000-C000-000000000046\n", r"t\.txt:1: I's base J is not declared"),
        ("interface I : - 00000000-0000-0000-C000-000000000046\nHRESULT M()\nHRESULT M()\n",
         r"t\.txt:3: M is declared twice \(first at line 2\)"),
    ],
)  # fmt: skip
def test_a_bad_table_line_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        api.parse(text, "t.txt")
    assert "\n" not in str(info.value)
