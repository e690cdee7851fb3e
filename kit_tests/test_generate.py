"""The generators are one list (kit/generate/__init__.py): `make generate`
and each make target run it, `--check` names every stale output with the
command that refreshes it, and the values' check needs no torch."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kit.generate as gen
from autograder import homework
from kit.generate import sources, values
from kit.generate.__main__ import main
from kit_tests.homework_env import homework_env

ROOT = Path(__file__).resolve().parents[1]


def _recipe(target: str) -> str:
    """The recipe lines of ``target`` in the Makefile."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", text, re.M)
    assert match, f"the Makefile has no target {target}"
    return match.group(1)


def test_every_make_target_runs_its_generator_from_the_list():
    assert _recipe("generate").split() == ["$(PY)", "-m", "kit.generate"]
    for g in gen.GENERATORS:
        assert _recipe(g.name).split() == [
            "$(PY)", "-m", "kit.generate", g.name], g.name


def test_fresh_values_checks_the_values_and_mistakes_without_torch():
    assert "-m kit.generate --check test-values mistakes" in \
        _recipe("fresh-values")
    code = ("import sys; from kit.generate import stale; "
            "lines = stale(['test-values', 'mistakes']); "
            "assert lines == [], lines; "
            "assert 'torch' not in sys.modules, 'imported torch'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr


def test_every_output_is_in_the_checkout():
    for g in gen.GENERATORS:
        for path in g.writes():
            assert path.exists() and path.is_relative_to(ROOT), (g.name, path)


def test_check_lists_every_stale_output_and_writing_stops_at_a_failure(
        monkeypatch, capsys):
    ran: list[str] = []

    def fake(name: str, lines: list[str], status: int) -> gen.Generator:
        return gen.Generator(name, "nothing", lambda: (),
                             lambda reference: lines,
                             lambda: ran.append(name) or status)

    monkeypatch.setattr(gen, "GENERATORS", (
        fake("one", ["a is stale: run `make one`"], 0),
        fake("two", [], 3),
        fake("three", ["b is stale: run `make three`"], 0)))
    assert main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "stale: a is stale: run `make one`" in err
    assert "stale: b is stale: run `make three`" in err
    assert main(["--check", "two"]) == 0
    assert main([]) == 3 and ran == ["one", "two"]
    assert main(["three", "one"]) == 0 and ran[2:] == ["one", "three"]


def test_an_unknown_generator_names_the_known_ones(capsys):
    assert main(["--check", "notebook"]) == 2
    err = capsys.readouterr().err
    assert "no generator notebook" in err
    assert all(g.name in err for g in gen.GENERATORS)


def test_the_values_check_is_one_and_names_a_changed_source(tmp_path):
    # The generator (torch) re-exports the torch-free check and sources.
    assert values.check_fresh is sources.check_fresh
    assert set(values.source_hashes()) == {
        str(p.relative_to(ROOT)) for p in sources.sources()}
    assert gen.stale(["test-values"]) == []
    shutil.copy(homework.staff().test_values / "manifest.json", tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["sources"]["kit/generate/cases.py"] = "0" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(sources.StaleValues,
                       match="kit/generate/cases.py changed.*"
                             "`make test-values`"):
        sources.check_fresh(tmp_path)


def _generate(*args: str, homework: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kit.generate", *args],
                          cwd=ROOT, env=homework_env(homework),
                          capture_output=True, text=True, timeout=120)


def test_another_homework_s_facts_are_its_own_documents(monkeypatch):
    # the facts generator follows the selected profile: the ffn homework's
    # facts go to its README only, and are in step with its rubric
    from autograder import homework
    from autograder.rubric import load_rubric
    from kit.generate import facts
    ffn = homework.load(ROOT / "homeworks" / "ffn", staff=True)
    monkeypatch.setattr(facts.homework, "staff", lambda: ffn)
    assert gen._facts_writes() == (ffn.root / "README.md",)
    assert facts.point_documents() == ["README.md"]
    assert facts.stale(load_rubric(ffn.rubric)) == []
    assert facts.stale(load_rubric()) == ["README.md"]   # another rubric's


def test_an_unusable_profile_is_one_line_with_exit_2(monkeypatch, capsys):
    from autograder.homework import HomeworkError
    from kit.generate import __main__ as cli

    def refuse(argv):
        raise HomeworkError("homework.toml: [docs] facts is missing: add it")
    monkeypatch.setattr(cli, "main", refuse)
    assert cli.run([]) == 2
    assert capsys.readouterr().err == (
        "error: homework.toml: [docs] facts is missing: add it\n")


@pytest.mark.e2e   # ~8 s: a fresh process imports every generator
def test_another_homework_s_generators_write_only_in_its_folder():
    # `make generate HOMEWORK=homeworks/ffn` leaves the checkout's files
    # (its README's facts among them) alone
    done = _generate("--list", homework=ROOT / "homeworks" / "ffn")
    assert done.returncode == 0, done.stderr
    writes = [path.strip() for line in done.stdout.splitlines()
              if line.split()[0] == "writes"
              for path in line.split("writes", 1)[1].split(",")]
    assert len(writes) >= len(gen.GENERATORS)
    assert all(p.startswith("homeworks/ffn/") for p in writes), writes
    assert "homeworks/ffn/README.md" in writes


@pytest.mark.e2e   # ~3 s: a fresh process
def test_an_unusable_profile_is_one_line_not_a_traceback(tmp_path):
    done = _generate("--check", homework=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "homework.toml is missing" in done.stderr
