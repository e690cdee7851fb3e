"""The parallel run's order (kit_tests/file_seconds.py): the slowest
files of the last run first, each file's tests together and in order, a
file not timed yet first, and the record merged run by run."""
from __future__ import annotations

from types import SimpleNamespace

from kit_tests import file_seconds


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_the_slowest_file_goes_first_and_files_stay_whole():
    items = _items("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1",
                   "c.py::t2")
    file_seconds.slowest_first(items, {"a.py": 1.0, "b.py": 9.0})
    assert [i.nodeid for i in items] == [
        "c.py::t1", "c.py::t2",            # not timed yet: first
        "b.py::t1", "a.py::t1", "a.py::t2"]


def test_files_not_timed_go_first_the_most_tests_first():
    items = _items("d.py::t1", "a.py::t1", "c.py::t1", "c.py::t2")
    file_seconds.slowest_first(items, {"a.py": 1.0})
    assert [i.nodeid for i in items] == ["c.py::t1", "c.py::t2", "d.py::t1",
                                         "a.py::t1"]


def test_without_a_record_the_most_tests_go_first():
    items = _items("a.py::t1", "b.py::t1", "b.py::t2")
    file_seconds.slowest_first(items, {})
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "a.py::t1"]


def test_the_record_is_merged_per_mark_expression(tmp_path):
    record = tmp_path / "build" / "seconds.json"
    assert file_seconds.recorded("not e2e", record) == {}
    file_seconds.remember("not e2e", {"a.py": 2.04, "b.py": 1.0}, record)
    file_seconds.remember("not e2e", {"b.py": 3.0}, record)
    file_seconds.remember("", {"a.py": 7.0}, record)
    assert file_seconds.recorded("not e2e", record) == {"a.py": 2.0,
                                                        "b.py": 3.0}
    assert file_seconds.recorded("", record) == {"a.py": 7.0}
    record.write_text("[not a table")
    assert file_seconds.recorded("not e2e", record) == {}
