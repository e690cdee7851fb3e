"""A batch survives any one submission, and one submission never changes
another's grade: bad zip names, names
that take the batch's own files, a source the similarity step cannot
parse, results too large to keep, and a parent stalled elsewhere. Each
case grades innocent submissions beside the hostile ones and checks their
rows of grades.csv and the class report."""
from __future__ import annotations

import csv
import ctypes
import os
import struct
import threading
import time
import zipfile
from pathlib import Path

import pytest

from autograder.staff import class_report, similarity
from autograder.report import layout
from autograder.sandbox import wire
from autograder.rubric import load_rubric
from autograder.text import csvsafe
from kit import variants
from kit.corpus.grading_batch import grade_batch
from kit_tests.test_cli import expected_row, run

REFERENCE = variants.find("styles/reference").source()
_FLIP = "\u202e"       # RIGHT-TO-LEFT OVERRIDE: reorders what follows
# The first module's forward returns a 62 MB tensor (just under a frame's
# 64 MB cap): its first result fits the submission's budget, the next
# ones do not, each on a fresh worker (one class: each fresh worker costs
# the test most of a second).
BIG_RETURNS = REFERENCE + """

def _big(*args, **kwargs):
    return torch.zeros(62 * 2 ** 20 // 4)


for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, nn.Module):
        _cls.forward = _big
        break
"""
# One 100,000-character expression: CPython's parser gives up on it.
DEEP = REFERENCE + "\n_X = " + "-" * 100_000 + "1\n"


def _flag_names_utf8(path: Path) -> None:
    """Set the UTF-8 flag on every entry of the zip at ``path``, in the
    central directory and the local headers, whatever the names are."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        while at >= 0:
            (flags,) = struct.unpack_from("<H", data, at + offset)
            struct.pack_into("<H", data, at + offset, flags | 0x800)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))


def _bad_utf8_zip(path: Path, source: str) -> None:
    """A zip whose central directory flags a name as UTF-8 that is not."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("transformer_lm/modeling_attention.py", source)
        zf.writestr("notes-X.txt", "mine")
    data = path.read_bytes().replace(b"notes-X.txt", b"notes-\xff.txt")
    path.write_bytes(data)
    _flag_names_utf8(path)
    with pytest.raises(UnicodeDecodeError):   # what once stopped the batch
        zipfile.ZipFile(path)


def _rows(out: Path) -> dict[str, list[str]]:
    """grades.csv's cells after each name, up to its path (the last)."""
    with open(out / "grades.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][-1] == "path"
    return {r[0]: r[1:-1] for r in rows[1:]}


@pytest.fixture(scope="module")
def hostile_batch(tmp_path_factory):
    """One CLI batch: innocent submissions beside every hostile name and
    source (the 62 MB returns are graded in-process below)."""
    src = tmp_path_factory.mktemp("subs")
    (src / "alice.py").write_text(REFERENCE)
    (src / "bob.py").write_text(
        variants.find("examples/merge_no_transpose").source())
    _bad_utf8_zip(src / "carol.zip", REFERENCE)
    (src / "grades.csv.py").write_text(REFERENCE)
    (src / "report.html.py").write_text(REFERENCE)
    (src / "answers.py").write_text(REFERENCE)
    (src / "deep.py").write_text(DEEP)
    odd = os.fsdecode(b"ev\xffil\x01\x1b[31m")     # not UTF-8, controls
    (src / odd / "transformer_lm").mkdir(parents=True)
    (src / odd / "transformer_lm" / "modeling_attention.py").write_text(
        REFERENCE)
    (src / ("x" * 240 + ".py")).write_text(REFERENCE)
    (src / "a b.py").write_text(REFERENCE)       # both become a_b
    (src / "a_b.py").write_text(REFERENCE)
    out = tmp_path_factory.mktemp("out")
    done = run("grade", "--out", str(out), "--jobs", "2",
               *sorted(str(p) for p in src.iterdir()))
    return out, done


@pytest.mark.e2e   # the CLI in its own process
def test_every_submission_gets_its_row(hostile_batch):
    out, done = hostile_batch
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(out)
    full = expected_row("styles/reference")
    for name in ("alice", "carol", "grades.csv", "report.html", "answers",
                 "ev_il_31m", "a_b", "a_b-2"):
        assert rows[name] == full, name
    assert rows["bob"] == expected_row("examples/merge_no_transpose")
    long = [n for n in rows if n.startswith("xxx")]
    assert len(long) == 1 and len(long[0]) <= 80 and rows[long[0]] == full
    assert "deep" in rows
    # the path of the renamed ones, as given, on one line and readable
    paths = {r["submission"]: r["path"]
             for r in csvsafe.read_dicts(out / "grades.csv")[1]}
    assert paths["ev_il_31m"].endswith("/ev\ufffdil<U+0001><U+001B>[31m")
    assert paths["a_b"].endswith("/a_b.py") and \
        paths["a_b-2"].endswith("/a b.py")
    assert paths[long[0]].endswith("/" + "x" * 240 + ".py")


@pytest.mark.e2e   # the CLI in its own process
def test_batch_files_stay_files(hostile_batch):
    out, _ = hostile_batch
    for name in ("grades.csv", "report.html"):
        assert (out / name).is_file()
    for name in ("grades.csv", "report.html", "answers"):
        assert (out / layout.SUBMISSIONS / name / "results.json").is_file()
    assert not (out / "answers").exists()   # only the TAs' pages go there
    report = (out / "report.html").read_text()
    assert "not written" not in hostile_batch[1].stdout
    for name in ("alice", "grades.csv", "report.html", "ev_il_31m"):
        assert f">{name}</a>" in report, name
    # links to every feedback page work from disk
    assert f"{layout.SUBMISSIONS}/alice/feedback.html" in report
    assert (out / layout.SUBMISSIONS / "alice" / "feedback.html").is_file()


@pytest.mark.e2e   # the CLI in its own process
def test_the_unparseable_source_is_left_out_of_similarity_only(
        hostile_batch):
    out, _ = hostile_batch
    report = (out / "report.html").read_text()
    assert "<section id='similarity'>" in report
    assert "deep: not compared" in report
    assert "Not computed" not in report
    summary = similarity.summary(out)
    assert "left out: deep: not compared" in summary
    assert "alice ~ " in summary or " ~ alice" in summary


def test_a_bad_zip_name_is_read_as_bytes(tmp_path):
    from autograder.submission.locate import resolve
    archive = tmp_path / "carol.zip"
    _bad_utf8_zip(archive, REFERENCE)
    sub = resolve(archive, tmp_path)
    assert not sub.error and sub.source == REFERENCE
    assert sub.filename == "carol.zip/transformer_lm/modeling_attention.py"


@pytest.mark.e2e   # the CLI in its own process
def test_an_export_with_bad_names_grades_the_rest(tmp_path):
    metadata = "".join(
        f"{folder}:\n  :submitters:\n  - :name: {who}\n    :sid: '{sid}'\n"
        f"    :email: {who.lower()}@example.edu\n"
        for folder, who, sid in (("submission_1", "Ada", 1),
                                 ("submission_2", "Alan", 2),
                                 ("../../etc", "Eve", 3),
                                 ("x" * 300, "Mallory", 4)))
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/submission_metadata.yml", metadata)
        zf.writestr("export/submission_1/modeling_attention.py", REFERENCE)
        zf.writestr("export/submission_2/modeling_attention.py", REFERENCE)
        zf.writestr("export/submission_2/notes-X.txt", "bad name")
        zf.writestr("export/submission_2/../../../escape.py", "x = 1\n")
    archive.write_bytes(archive.read_bytes().replace(b"notes-X.txt",
                                                     b"notes-\xfe.txt"))
    _flag_names_utf8(archive)
    out = tmp_path / "out"
    done = run("grade", "--out", str(out), "--jobs", "2", str(archive))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(out)
    full = expected_row("styles/reference")
    assert set(rows) == {"submission_1", "submission_2"}
    for name in rows:
        assert rows[name][4:] == full, name   # after id, name, email, sid
    assert rows["submission_2"][1] == "Alan"
    assert "unsafe path" in done.stdout and "left out" in done.stdout
    assert not (tmp_path / "escape.py").exists()
    assert (out / "report.html").is_file()


def test_a_similarity_failure_leaves_the_report(tmp_path, monkeypatch):
    folder = layout.submission_dir(tmp_path, "alice")
    folder.mkdir(parents=True)
    (folder / "source.py").write_text(REFERENCE)

    def broken(*args, **kwargs):
        raise MemoryError("simulated")
    monkeypatch.setattr(similarity, "report_section", broken)
    page = class_report.write_report(tmp_path, {}).read_text()
    assert "Not computed: MemoryError: simulated" in page


def test_a_class_report_failure_leaves_a_page_saying_so(
        tmp_path, monkeypatch):
    from autograder import graded_folder

    def broken(out, messages, **options):
        raise RecursionError("simulated")
    monkeypatch.setattr(class_report, "write_report", broken)
    line = graded_folder.write_class_report(tmp_path, {})
    assert "not written (RecursionError: simulated)" in line
    page = (tmp_path / "report.html").read_text()
    assert "RecursionError: simulated" in page


def test_failure_pages_write_invisible_characters_out(tmp_path,
                                                      monkeypatch):
    """The "not computed" / "not written" pages quote an exception,
    which may name a submission's file: escaped like any student text."""
    from autograder import graded_folder
    (layout.submission_dir(tmp_path, "alice")).mkdir(parents=True)

    def broken(*args, **kwargs):
        raise OSError(f"cannot read alice{_FLIP}gpj.py")
    monkeypatch.setattr(similarity, "report_section", broken)
    page = class_report.write_report(tmp_path, {}).read_text()
    assert "Not computed: OSError" in page
    assert _FLIP not in page and "&lt;U+202E&gt;" in page
    monkeypatch.setattr(class_report, "write_report", broken)
    assert "not written" in graded_folder.write_class_report(tmp_path, {})
    page = (tmp_path / class_report.REPORT_NAME).read_text()
    assert _FLIP not in page and "&lt;U+202E&gt;" in page


def test_similarity_bounds_tokens_and_time(monkeypatch):
    notes: list[str] = []
    lines = similarity.MAX_TOKENS // 3 + 1     # 3 tokens a line
    codes = {"a": "x = 1\n" * 10, "b": "x = 1\n" * 10,
             "huge": "y = z\n" * lines}
    similarity.code_pairs(codes, "", notes)
    assert notes == [f"huge: not compared ({3 * lines} tokens of code; "
                     f"the limit is {similarity.MAX_TOKENS})"]
    notes.clear()
    many = {f"s{i}": f"v{i} = w + {i}\n" * 5 for i in range(30)}
    similarity.code_pairs(many, "", notes, budget=0.0)
    assert notes and "stopped after 0 of 435 pairs" in notes[0]
    assert similarity.student_code(DEEP, "")   # no parser error escapes


# --------------------------------------------------------------------------
# The parent's memory and time per submission

def test_results_are_bounded_per_submission_across_workers(monkeypatch):
    used: dict[int, int] = {}
    take = wire.Budget.take

    def counting(self, size):
        take(self, size)
        used[id(self)] = self.used
    monkeypatch.setattr(wire.Budget, "take", counting)
    grades = grade_batch({"big": BIG_RETURNS, "alice": REFERENCE},
                         timeouts={"big": 5.0})
    from autograder.sandbox.limits import LIMITS
    assert max(used.values()) <= LIMITS.results_mb << 20
    rubric = load_rubric()
    assert grades["alice"].score == rubric.max_score + rubric.max_bonus
    big = grades["big"]
    assert not big.internal_error and big.score < rubric.max_score
    assert big.limits.get("crash", 0) >= 2    # refused on two workers


def _stall_the_parent(started: threading.Event, seconds: float,
                      times: int) -> None:
    """Once grading has started, hold the interpreter lock ``times``
    times for ``seconds`` each, as the answers regex once held it in C:
    a C sleep called through ``ctypes.PyDLL``, which keeps the lock
    (no other thread runs) and, unlike a busy loop, no CPU."""
    hold = ctypes.PyDLL(None).usleep
    started.wait(60)
    for _ in range(times):
        hold(int(seconds * 1_000_000))
        time.sleep(0.3)


@pytest.mark.e2e   # 75 s of a stalled parent (asleep), by design
def test_a_stalled_parent_costs_no_neighbour_its_grade():
    # Three stalls of 25 s while two correct submissions are graded with
    # a total limit of 60 s each (they need about 2 quiet, and under a
    # load of 35 still well under 60): counted as their time, the stalls
    # would use up the limit and fail their last probes.
    from autograder import batch
    from autograder.config import load_config
    from autograder.grade import sandbox_runner
    from autograder.sandbox.pool import Sandbox
    config = load_config()
    rubric = config.rubric
    sources = {"alice": REFERENCE,
               "bob": variants.find("examples/merge_no_transpose").source()}
    started = threading.Event()
    with Sandbox() as sandbox:
        runner = sandbox_runner(sandbox, total_seconds=60.0)

        def watched(*args):
            started.set()
            return runner(*args)

        stall = threading.Thread(target=_stall_the_parent,
                                 args=(started, 25.0, 3), daemon=True)
        try:
            stall.start()
            graded = batch.grade_all(
                [batch.Entry(name, Path(f"{name}.py"), source)
                 for name, source in sources.items()], config, watched,
                jobs=2)
        finally:
            stall.join()
    grades = dict(zip(sources, graded.grades))
    seen = {name: (g.score, g.limits) for name, g in grades.items()}
    assert grades["alice"].score == rubric.max_score + rubric.max_bonus, seen
    assert not grades["alice"].limits and not grades["bob"].limits, seen
    expected = variants.expect(variants.find("examples/merge_no_transpose"),
                               rubric).scores
    assert grades["bob"].score == pytest.approx(sum(expected.values()))


def _release(fifos: list[Path]) -> None:
    """Open a writer on each FIFO (a reader blocked in open() returns)."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


@pytest.mark.e2e   # the CLI in its own process, twice
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_malformed_inputs_cost_no_neighbour_its_grade(tmp_path):
    """Malformed inputs (a zip slip, a zip bomb, FIFOs named as
    a submission, a folder holding one) graded beside a correct one, in a
    first run and a resumed one (the resume stamp digests every input,
    and once blocked there on a FIFO). Every input gets its
    row, the neighbour full marks, nothing is written outside."""
    src = tmp_path / "subs"
    src.mkdir()
    (src / "alice.py").write_text(REFERENCE)               # the neighbour
    with zipfile.ZipFile(src / "slip.zip", "w") as zf:
        zf.writestr("../../escaped.py", REFERENCE)
        zf.writestr("transformer_lm/modeling_attention.py", REFERENCE)
    with zipfile.ZipFile(src / "bomb.zip", "w",
                         compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("transformer_lm/modeling_attention.py",
                    b"#" * 60_000_000)
    fifos = [src / "fifo.py", src / "fifo.zip", src / "fifo",
             src / "holder" / "transformer_lm" / "modeling_attention.py"]
    fifos[-1].parent.mkdir(parents=True)
    for fifo in fifos:
        os.mkfifo(fifo)
    out = tmp_path / "out"
    names = sorted(str(p) for p in src.iterdir())
    for attempt in ("first", "resumed"):
        timer = threading.Timer(240, _release, (fifos,))
        timer.start()   # a hang fails the test, never the suite
        try:
            done = run("grade", "--out", str(out), *names)
        finally:
            released = not timer.is_alive()
            timer.cancel()
        assert not released, f"{attempt} run blocked on a FIFO"
        assert done.returncode == 0, done.stderr[-3000:]
        rows = _rows(out)
        assert rows["alice"] == expected_row("styles/reference"), attempt
        for name in ("slip", "bomb", "fifo", "fifo-2", "fifo-3", "holder"):
            match = [n for n in rows if n == name]
            assert match and rows[name][0] == "0", (attempt, name, rows)
    assert not (tmp_path / "escaped.py").exists()
    assert not list(tmp_path.rglob("escaped.py"))
    assert all(f.exists() for f in fifos)   # nothing replaced them
