"""Finding modeling_attention.py in a .py, a folder or a zip, safely."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from autograder.submission import locate as S

CODE = "class SelfAttention: pass\n"


def _write(path: Path, text: str = CODE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_py_file(tmp_path):
    sub = S.resolve(_write(tmp_path / "alice.py"), tmp_path)
    assert (sub.name, sub.source, sub.error) == ("alice", CODE, "")


def test_directory_prefers_transformer_lm(tmp_path):
    root = tmp_path / "bob"
    _write(root / "transformer_lm" / "modeling_attention.py")
    _write(root / "old" / "modeling_attention.py", "old = 1\n")
    sub = S.resolve(root, tmp_path)
    assert sub.source == CODE and sub.name == "bob"
    assert sub.filename == "bob/transformer_lm/modeling_attention.py"


def test_directory_with_none_or_several(tmp_path):
    empty = tmp_path / "empty"
    _write(empty / "notes.txt", "hi")
    assert "no modeling_attention.py" in S.resolve(empty, tmp_path).error
    several = tmp_path / "several"
    _write(several / "a" / "modeling_attention.py")
    _write(several / "b" / "modeling_attention.py")
    assert "several" in S.resolve(several, tmp_path).error


def test_debris_and_symlinks_are_ignored(tmp_path):
    root = tmp_path / "carol"
    _write(root / "modeling_attention.py")
    _write(root / "__MACOSX" / "modeling_attention.py", "junk")
    _write(root / ".ipynb_checkpoints" / "modeling_attention.py", "junk")
    (root / "link").mkdir()
    (root / "link" / "modeling_attention.py").symlink_to("/etc/hostname")
    assert S.resolve(root, tmp_path).source == CODE


def test_zip_of_folder_and_of_file(tmp_path):
    archive = tmp_path / "dave.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("dave/transformer_lm/modeling_attention.py", CODE)
        zf.writestr("dave/assignment/attention.ipynb", "{}")
    sub = S.resolve(archive, tmp_path)
    assert sub.source == CODE and sub.name == "dave"
    assert [n.name for n in sub.notebooks] == ["attention.ipynb"]
    single = tmp_path / "erin.zip"
    with zipfile.ZipFile(single, "w") as zf:
        zf.writestr("my_attention.py", CODE)
    assert S.resolve(single, tmp_path).source == CODE


@pytest.mark.parametrize("member", ["../evil.py", "/abs/evil.py",
                                    "a/../../evil.py", "C:/evil.py"])
def test_zip_path_traversal_is_refused(tmp_path, member):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("modeling_attention.py", CODE)
        zf.writestr(member, "x")
    work = tmp_path / "work"
    work.mkdir()
    sub = S.resolve(archive, work)
    assert "unsafe path" in sub.error
    assert not (tmp_path / "evil.py").exists()


def test_zip_caps(tmp_path, monkeypatch):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("modeling_attention.py", CODE)
        zf.writestr("zeros.bin", b"\0" * 100_000)
    monkeypatch.setattr(S, "MAX_ZIP_FILE_BYTES", 10_000)
    assert "too large" in S.resolve(archive, tmp_path).error
    monkeypatch.setattr(S, "MAX_ZIP_ENTRIES", 1)
    assert "entries" in S.resolve(archive, tmp_path).error


def test_not_a_zip_and_not_utf8(tmp_path):
    fake = tmp_path / "fake.zip"
    fake.write_bytes(b"not a zip")
    assert "not a readable zip" in S.resolve(fake, tmp_path).error
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# caf\xe9\n")
    assert "UTF-8" in S.resolve(latin, tmp_path).error


def test_usage_errors(tmp_path):
    with pytest.raises(S.UsageError):
        S.check_path(tmp_path / "missing.py")


def test_a_file_of_the_wrong_kind_is_graded_not_fatal(tmp_path):
    # A stray file in a folder of submissions must not stop the batch.
    notes = _write(tmp_path / "notes.txt")
    S.check_path(notes)
    sub = S.resolve(notes, tmp_path)
    assert sub.source is None
    assert "notes.txt is not a submission" in sub.error


def test_names_are_stems_and_unique():
    assert S.submission_name(Path("x/alice smith.zip")) == "alice_smith"
    assert S.submission_name(Path("x/bob.py")) == "bob"
    assert S.unique_names(["a", "b", "a", "a"]) == ["a", "b", "a-2", "a-3"]
