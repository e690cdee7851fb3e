"""The anonymised view (``report --anonymise``, ``grade --anonymise``):
stable pseudonyms in the class report, the feedback, the answer pages and
the similarity pages, a staff-only key, and no name, email, student id,
submission name or path in any file of the view, student text included
(each beside its control: the plain report does name them)."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.staff import anonymise as A
from autograder.staff import class_report
from autograder.text import csvsafe

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
# Who the grader knows: a Gradescope export's names, emails and SIDs.
STUDENTS = {
    "submission_901": ("Alice Moreau", "alice.moreau@uni.example", "31415926"),
    "submission_902": ("Bartholomew Quist", "bq77@uni.example", "27182818"),
    "submission_903": ("Chidinma O'Neill", "chidi@uni.example", "16180339"),
}
LOCAL = "zed_kowalczyk"     # a local file's name: the only identity known


def _results(score: float) -> dict:
    return {"score": score, "extra_data": {"tasks": {"part1": score}},
            "tests": [{"name": "Part 1 / 1.1 SelfAttention output",
                       "number": "1.1", "score": score, "max_score": 4,
                       "status": "passed" if score == 4 else "failed",
                       "output": "expected vs got", "tags": ["part1"]}]}


def graded_folder(out: Path, sources: dict[str, str] | None = None) -> Path:
    """A graded folder as ``grade`` leaves it after a Gradescope export
    (grades.csv with names, emails and SIDs; each submission's
    results.json, feedback.md, source.py and answers.json), whose student
    text names its authors."""
    sources = sources or {}
    rows = [["submission", "submission_id", "name", "email", "sid", "score",
             "max_score", "part1", "path"]]
    everyone = {**{k: v for k, v in STUDENTS.items()},
                LOCAL: ("", "", "")}
    for i, (sub, (name, email, sid)) in enumerate(everyone.items()):
        folder = out / "submissions" / sub
        folder.mkdir(parents=True)
        score = [4, 2, 4, 3][i]
        (folder / "results.json").write_text(json.dumps(_results(score)))
        signed = name or LOCAL
        (folder / "feedback.md").write_text(
            f"# Feedback: {sub}\n\nScore {score}/4.\n\n```\n"
            f"note = 'written by {signed} <{email}>'\n```\n")
        (folder / "source.py").write_text(sources.get(
            sub, REFERENCE.read_text()).replace(
            "super().__init__()", f"super().__init__()\n        "
            f"author = '{signed} {sid}'", 1))
        (folder / "answers.json").write_text(json.dumps({
            "Q1": f"Scaling keeps the softmax from saturating; answer of "
                  f"{sub} written alone. -- {signed}, {email} ({sid})",
            "Q2": "Each head attends in its own subspace of the values."}))
        rows.append([sub, sub.removeprefix("submission_"), name, email, sid,
                     score, 4, score, f"export.zip/{sub}"])
    csvsafe.write_rows(out / "grades.csv", rows)
    (out / "answers").mkdir()
    return out


def _identifiers() -> list[str]:
    found = [LOCAL, "Kowalczyk"]
    for sub, (name, email, sid) in STUDENTS.items():
        found += [sub, name, email, sid, *name.split(), email.split("@")[0]]
    return found


def _leaks(folder: Path) -> list[tuple[str, str]]:
    """(file, identifier) for every identifier in every file of
    ``folder``, case-blind, in plain and HTML-escaped form."""
    import html
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = (path.relative_to(folder).as_posix() + "\n"
                + path.read_text(errors="replace")).lower()
        for ident in _identifiers():
            for form in {ident.lower(), html.escape(ident).lower()}:
                if form in text:
                    found.append((path.relative_to(folder).as_posix(), ident))
    return found


def test_the_view_names_no_one_and_the_plain_report_does(tmp_path):
    out = graded_folder(tmp_path / "out")
    line = A.write_views(
        out, {}, class_report.ReportOptions(anonymise=True), strict=True)
    assert "anonymised view:" in line
    view = out / A.VIEW
    files = sorted(p.relative_to(view).as_posix()
                   for p in view.rglob("*") if p.is_file())
    assert "report.html" in files and any(
        f.startswith("answers/Q1") for f in files) and sum(
        f.endswith("feedback.html") for f in files) == 4
    assert any(f.startswith("similarity/pair-") for f in files)
    assert _leaks(view) == []
    # The control: the plain report, pages and similarity do name them.
    plain = {p for p, _ in _leaks(out) if not p.startswith(A.VIEW)}
    assert "report.html" in plain and "pseudonyms.csv" in plain
    # Each pseudonym stands where its submission did.
    names = {row["submission"]: row["pseudonym"] for row in
             csvsafe.read_dicts(out / A.KEY_NAME)[1]}
    assert set(names) == {*STUDENTS, LOCAL}
    report = (view / "report.html").read_text()
    for pseudonym in names.values():
        assert re.fullmatch(r"anon-[2-9B-DF-HJ-NP-TV-XZ]{4}", pseudonym)
        assert pseudonym in report
        assert (view / "submissions" / pseudonym / "feedback.html").is_file()
    q1 = (view / "answers" / "Q1.md").read_text()
    assert all(p in q1 for p in names.values()) and "(withheld)" in q1
    assert "Scaling keeps the softmax" in q1    # the answers themselves stay


def test_the_key_is_staff_only_and_pseudonyms_are_stable(tmp_path):
    out = graded_folder(tmp_path / "out")
    key = tmp_path / "term" / "pseudonyms.csv"
    options = class_report.ReportOptions(anonymise=True, key=key)
    A.write_views(out, {}, options, strict=True)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert not (out / A.KEY_NAME).exists()     # the key given is the key
    first = csvsafe.read_dicts(key)[1]
    # A regrade into another folder, one student more: the same key keeps
    # every pseudonym and draws one for the newcomer.
    again = graded_folder(tmp_path / "regrade")
    extra = again / "submissions" / "yves"
    extra.mkdir()
    (extra / "results.json").write_text(json.dumps(_results(1)))
    rows = csvsafe.read_rows(again / "grades.csv")
    csvsafe.write_rows(again / "grades.csv", rows + [
        ["yves", "", "", "", "", 1, 4, 1, "yves.py"]])
    A.write_views(again, {}, options, strict=True)
    second = {r["identity"]: r["pseudonym"]
              for r in csvsafe.read_dicts(key)[1]}
    assert all(second[r["identity"]] == r["pseudonym"] for r in first)
    assert len(second) == len(first) + 1
    assert len(set(second.values())) == len(second)
    # The control: without the key, a new folder draws new pseudonyms.
    other = graded_folder(tmp_path / "fresh")
    A.write_views(other, {}, class_report.ReportOptions(
        anonymise=True), strict=True)
    fresh = {r["identity"]: r["pseudonym"]
             for r in csvsafe.read_dicts(other / A.KEY_NAME)[1]}
    assert fresh != {r["identity"]: r["pseudonym"] for r in first}


def test_a_malformed_key_is_refused_with_its_line(tmp_path):
    key = tmp_path / "key.csv"
    key.write_text(",".join(A.KEY_HEADER) + "\nanon-BCDF,sid:1,a,,,\n"
                   "anon-BCDF,sid:2,b,,,\n")
    with pytest.raises(A.KeyError_, match=r"line 3: pseudonym anon-BCDF"):
        A.check_key(key)
    key.write_text("who,what\n")
    with pytest.raises(A.KeyError_, match="line 1"):
        A.check_key(key)
    # The control: a well-formed key is read.
    key.write_text(",".join(A.KEY_HEADER) + "\nanon-BCDF,sid:1,a,,,\n")
    assert A.check_key(key).rows["sid:1"][0] == "anon-BCDF"


def test_report_command_writes_the_view_and_refuses_a_bad_key(tmp_path):
    out = graded_folder(tmp_path / "out")
    (out / ".batch.json").write_text(json.dumps({"state": "complete"}))
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,key\n")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "report", str(out),
         "--anonymise", "--pseudonym-key", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "line 1" in done.stderr
    assert not (out / A.VIEW).exists()
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "report", str(out),
         "--anonymise"], capture_output=True, text=True, cwd=ROOT,
        timeout=300)
    assert done.returncode == 0, done.stderr
    assert "anonymised view:" in done.stdout
    assert _leaks(out / A.VIEW) == []


def test_the_scrubber_matches_whole_words_only():
    found = A.people([{"submission": "ann", "name": "Ann Lee",
                       "email": "al@x.org", "sid": "4242"}])
    scrub = A.Scrubber.of(found, {"ann": "anon-BCDF"})
    assert scrub("ann wrote: Ann Lee <al@x.org> 4242; planning 42420 Annex") \
        == "anon-BCDF wrote: (withheld) <(withheld)> (withheld); " \
           "planning 42420 Annex"
    assert scrub.leaks("by LEE") == ["LEE"] and scrub.leaks("anon-BCDF") == []
    # A 1-3 digit SID or a one-letter name would take every score, line
    # number or article with it: kept in its (dropped) column only.
    found = A.people([{"submission": "a", "name": "", "email": "",
                       "sid": "7"}])
    scrub = A.Scrubber.of(found, {"a": "anon-BCDF"})
    assert scrub("a score of 7 of 16") == "a score of 7 of 16"
