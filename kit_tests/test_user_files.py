"""Nothing a user names is opened before it is known to be a regular
file: a FIFO (or a device, a socket, a link) in place of a submission,
a notebook, a graded folder's files or the test values is refused at
once, never waited on (a FIFO named as a submission once hung the
whole batch in the resume stamp's digest). Each read beside its control
on a regular file."""
from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path

import pytest

from autograder.report import batch_state
from autograder.files.user_files import (NotRegularFile, open_regular,
                                         read_regular, read_regular_text)
from autograder.submission import answers, locate
from autograder.text import csvsafe

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"),
                                reason="no FIFOs on this platform")


def _finishes(call, *fifos: Path, seconds: float = 60.0):
    """``call()``'s result, asserting it does not block on the FIFOs: if
    it still runs after ``seconds`` (a reader blocked in open()), a writer
    is opened on each to release it and the test fails."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:   # noqa: BLE001 - handed back
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(10)
        pytest.fail(f"blocked on a FIFO: {call}")
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_regular_file_is_read_and_a_fifo_refused(tmp_path, fifo):
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"a\r\nb")
    assert read_regular(plain) == b"a\r\nb"
    assert read_regular_text(plain) == "a\nb"
    with pytest.raises(NotRegularFile, match="a FIFO"):
        _finishes(lambda: open_regular(fifo), fifo)


def test_staff_files_may_be_links_to_a_regular_file_only(tmp_path, fifo):
    # A rubric kept in a course's repository and linked: followed where
    # the caller allows it, to a regular file only, never waiting.
    target = tmp_path / "rubric.toml"
    target.write_text("x = 1\n")
    link = tmp_path / "linked.toml"
    link.symlink_to(target)
    assert read_regular_text(link, follow_links=True) == "x = 1\n"
    with pytest.raises(NotRegularFile, match="a link"):
        read_regular(link)                      # the control: not allowed
    to_fifo = tmp_path / "to-fifo"
    to_fifo.symlink_to(fifo)
    with pytest.raises(NotRegularFile, match="a FIFO"):
        _finishes(lambda: read_regular(to_fifo, follow_links=True), fifo)


def test_links_devices_and_folders_are_refused(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("x")
    (tmp_path / "link.txt").symlink_to(target)
    for path, kind in ((tmp_path / "link.txt", "a link"),
                       (Path(os.devnull), "a character device"),
                       (tmp_path, "a folder")):
        with pytest.raises(NotRegularFile, match=kind):
            read_regular(path)


def test_a_limit_reads_no_more_than_it_allows(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 11)
    assert read_regular(path, 11) == b"x" * 11
    with pytest.raises(ValueError, match="larger than 10"):
        read_regular(path, 10)


def test_the_resume_digest_and_stamps_skip_a_fifo(tmp_path, fifo):
    plain = tmp_path / "a.py"
    plain.write_text("x = 1\n")
    assert batch_state.input_digest(plain) is not None     # control
    assert _finishes(lambda: batch_state.input_digest(fifo), fifo) is None
    stamp = tmp_path / "stamp"
    stamp.write_text('{"a": 1}')
    assert batch_state.load(stamp) == {"a": 1}              # control
    assert _finishes(lambda: batch_state.load(fifo), fifo) is None
    assert _finishes(lambda: batch_state.file_digest(fifo), fifo) is None


@pytest.mark.parametrize("name", ["sub.py", "sub.zip", "sub"])
def test_a_fifo_as_a_submission_is_the_students_error(tmp_path, name):
    path = tmp_path / name
    os.mkfifo(path)
    work = tmp_path / "work"
    work.mkdir()
    sub = _finishes(lambda: locate.resolve(path, work), path)
    assert sub.source is None and not sub.internal_error
    assert "not a regular file (a FIFO)" in sub.error or \
        "is not a submission" in sub.error, sub.error


def test_a_fifo_in_a_folder_or_beside_a_notebook_is_skipped(tmp_path):
    folder = tmp_path / "dir" / "transformer_lm"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "modeling_attention.py")
    work = tmp_path / "work"
    work.mkdir()
    sub = _finishes(lambda: locate.resolve(tmp_path / "dir", work),
                    folder / "modeling_attention.py")
    assert sub.source is None and "no modeling_attention.py" in sub.error
    notebook = tmp_path / "n.ipynb"
    os.mkfifo(notebook)
    with pytest.raises(answers.AnswersError):
        _finishes(lambda: answers.read_notebook(notebook), notebook)


def test_a_zip_is_still_read_from_its_handle(tmp_path):
    archive = tmp_path / "z.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py", "x = 1\n")
    assert locate.zip_names(archive) == \
        ["transformer_lm/modeling_attention.py"]
    work = tmp_path / "work"
    work.mkdir()
    assert locate.resolve(archive, work).source == "x = 1\n"


def test_a_graded_folders_csv_is_not_waited_on(tmp_path, fifo):
    with pytest.raises(NotRegularFile):
        _finishes(lambda: csvsafe.read_rows(fifo), fifo)
