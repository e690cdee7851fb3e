"""The notebook's text source (assignment/attention.md) and its build.

* no control character in the source or the built notebook (a TAB once ate
  the ``\\t`` of ``\\text`` and ``\\times``: students saw "√ext head_dim");
* every formula of every markdown cell renders in MathJax, in headless
  Debian chromium, with the MathJax that the PyPI package
  ``jupyter-server-mathjax`` ships (skipped, saying why, without either);
* the rubric drives every number: a point changed in a copy of the rubric
  changes the notebook, and the old number is gone for that task;
* an unknown placeholder or a broken task/question notation is an error
  that names the source line.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
import yaml

from autograder import homework
from autograder.rubric import load_rubric
from kit.generate import notebook
from kit_tests.rubrics import item_points, points_words

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = ROOT / "autograder" / "rubric.toml"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_SPEC = importlib.util.find_spec("jupyter_server_mathjax")
MATHJAX = (Path(_SPEC.origin).parent / "static" / "MathJax.js"
           if _SPEC and _SPEC.origin else None)
needs_mathjax = pytest.mark.skipif(
    CHROMIUM is None or MATHJAX is None or not MATHJAX.is_file(),
    reason="needs Debian's chromium (apt-get install -y chromium) and "
           "MathJax from PyPI (pip install jupyter-server-mathjax)")

# $$...$$, $...$ and \begin{env}...\end{env}, as Jupyter finds math.
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|(\\begin\{(\w+\*?)\}.+?"
                   r"\\end\{\4\})", re.S)
_CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)


def formulas(markdown: str) -> list[str]:
    """Every formula of a markdown text, code spans and blocks excepted.
    A ``$`` left over (an unclosed formula) is returned as itself."""
    text = _CODE.sub("", markdown)
    found = [m.group(1) or m.group(2) or m.group(3)
             for m in _MATH.finditer(text)]
    if "$" in _MATH.sub("", text):
        found.append("$")
    return found


def notebook_formulas(nb: nbformat.NotebookNode) -> list[str]:
    return [f for c in nb.cells if c.cell_type == "markdown"
            for f in formulas(c.source)]


_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<script type="text/x-mathjax-config">
MathJax.Hub.Config({skipStartupTypeset: true, messageStyle: "none",
  showMathMenu: false, "fast-preview": {disabled: true},
  TeX: {noErrors: {disabled: true}, noUndefined: {disabled: true}}});
</script>
<script src="MATHJAX_URL?config=TeX-AMS-MML_HTMLorMML-full"></script>
</head><body><pre id="result">pending</pre><div id="math"></div><script>
const formulas = FORMULAS;
const problems = {};
MathJax.Hub.Register.MessageHook("TeX Jax - parse error", function (m) {
  problems[m[4].getAttribute("data-index")] = m[1]; });
MathJax.Hub.Register.MessageHook("Math Processing Error", function (m) {
  problems[m[1].getAttribute("data-index")] = String(m[2]); });
const box = document.getElementById("math");
formulas.forEach(function (tex, i) {
  const script = document.createElement("script");
  script.type = "math/tex; mode=display";
  script.setAttribute("data-index", String(i));
  script.text = tex;
  box.appendChild(script); });
function merror(node) {
  if (!node) return false;
  if (node.type === "merror") return true;
  return (node.data || []).some(merror); }
MathJax.Hub.Queue(["Typeset", MathJax.Hub, box], function () {
  box.querySelectorAll("script").forEach(function (script) {
    const i = script.getAttribute("data-index");
    const jax = MathJax.Hub.getJaxFor(script);
    if (!jax) problems[i] = problems[i] || "not typeset";
    else if (merror(jax.root)) problems[i] = problems[i] || "merror"; });
  document.getElementById("result").textContent =
    "RESULT" + JSON.stringify(problems); });
</script></body></html>
"""


def mathjax_problems(texts: list[str], folder: Path) -> dict[str, str]:
    """Formula -> MathJax's error, for every formula that fails to render.
    MathJax loads the configuration the Jupyter notebook uses (TeX with
    AMS math and symbols), but with ``noErrors`` and ``noUndefined`` off:
    they would show a broken formula or an unknown command in red
    instead of reporting it."""
    page = folder / "formulas.html"
    page.write_text(_PAGE.replace("MATHJAX_URL", MATHJAX.as_uri()).replace(
        "FORMULAS", json.dumps(texts).replace("</", "<\\/")))
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--allow-file-access-from-files", "--virtual-time-budget=20000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180)
    found = re.search(r"RESULT(\{.*?\})</pre>", done.stdout, re.S)
    assert found, ("MathJax did not finish in chromium",
                   done.stdout[-1000:], done.stderr[-2000:])
    return {texts[int(i)]: error
            for i, error in json.loads(found.group(1)).items()}


def control_characters(text: str) -> list[str]:
    """What a formula or cell holds that TeX or markdown silently eat: a
    TAB renders as a space, so "\\t" of "\\text" lost to a TAB renders."""
    return [repr(c) for c in text if ord(c) < 32 and c != "\n"]


# -- control characters ----------------------------------------------------

def test_no_control_character_in_source_or_notebook():
    text = homework.staff().notebook_source.read_text(encoding="utf-8")
    assert [(n, control_characters(line)) for n, line
            in enumerate(text.split("\n"), 1)
            if control_characters(line)] == []
    built = nbformat.read(str(homework.staff().notebook), as_version=4)
    assert [(c.id, control_characters(c.source)) for c in built.cells
            if control_characters(c.source)] == []


def test_a_tab_in_the_source_is_rejected_with_its_line(tmp_path):
    text = homework.staff().notebook_source.read_text(encoding="utf-8")
    assert "\\sqrt{\\text{head\\_dim}}" in text
    line = text[:text.index("\\sqrt{\\text{head")].count("\n") + 1
    broken = tmp_path / "attention.md"
    broken.write_text(text.replace("\\sqrt{\\text{head", "\\sqrt{\text{head"))
    shutil.copytree(homework.staff().notebook_source.parent / "figures",
                    tmp_path / "figures")
    with pytest.raises(notebook.MasterError,
                       match=rf"attention.md:{line}: control character "
                             r"'\\t'"):
        notebook.build(broken)
    assert notebook.write(master=broken,
                          out=tmp_path / "out.ipynb") == 2
    assert not (tmp_path / "out.ipynb").exists()


# -- formulas --------------------------------------------------------------

def test_formulas_are_found():
    nb = nbformat.read(str(homework.staff().notebook), as_version=4)
    found = notebook_formulas(nb)
    assert len(found) > 40
    for expected in ("\\sqrt{h}", "768 \\times 768",
                     "\\sqrt{\\text{head\\_dim}}"):
        assert expected in found, expected
    assert any(f.startswith("\\begin{cases}") or "\\begin{cases}" in f
               for f in found)
    assert "$" not in found
    assert formulas("`$x` and\n```\n$y\n```") == []
    assert formulas("a $x$ b $$y$$ c $z") == ["x", "y", "$"]


@needs_mathjax
def test_every_formula_renders_in_mathjax(tmp_path):
    nb = nbformat.read(str(homework.staff().notebook), as_version=4)
    found = notebook_formulas(nb)
    assert [f for f in found if control_characters(f)] == []
    assert mathjax_problems(found, tmp_path) == {}


@needs_mathjax
def test_mathjax_check_rejects_broken_formulas(tmp_path):
    # The historic bugs as Python once made them: "\r" of "\right" and
    # "\b" of "\begin" turned into control characters, and a misspelling.
    broken = ["\\left(\\frac{a}{b}\right)", "\begin{cases} 0 & 1 "
              "\\end{cases}", "\\sqrtt{h}"]
    # A TAB for the "\t" of "\text" or "\times" renders (TeX reads it as a
    # space), so the control-character rule is what catches that one.
    tab = "\\sqrt{\text{head\\_dim}}, 768 \times 768"
    problems = mathjax_problems(["\\sqrt{h}", *broken, tab], tmp_path)
    assert sorted(problems) == sorted(broken), problems   # one MathJax run
    assert control_characters(tab) == ["'\\t'", "'\\t'"]


# -- rubric facts ----------------------------------------------------------

def _changed_rubric(tmp_path: Path, task: str, old: float,
                    new: float) -> Path:
    """A copy of the rubric with item ``task``'s points ``old`` -> ``new``:
    the instructor's one edit (the total is derived)."""
    rubric = RUBRIC.read_text()
    match = re.search(rf'id = "{re.escape(task)}"\n(?:\w+ = .*\n)*?'
                      rf"points = {old:g}\n", rubric)
    assert match, f"item {task} with {old} points not in the rubric"
    changed = tmp_path / "rubric.toml"
    item = match.group(0).replace(f"points = {old:g}", f"points = {new:g}")
    changed.write_text(rubric[:match.start()] + item + rubric[match.end():])
    return changed


def _task_facts(nb: nbformat.NotebookNode, task: str) -> list[str]:
    """Every line of the notebook that states a fact of ``task``."""
    name = "task_" + task.replace(".", "_")
    return [line for c in nb.cells for line in c.source.splitlines()
            if line.startswith((f"### Task {task} ", f"| {task} |"))
            or (c.source.startswith(f"# BEGIN QUESTION\nname: {name}\n")
                and line.startswith("points:"))]


def test_a_point_changed_in_the_rubric_changes_the_notebook(tmp_path):
    old = item_points("2.2")
    new = old + 3
    before = notebook.build()
    after = notebook.build(rubric=_changed_rubric(tmp_path, "2.2", old, new))
    assert _task_facts(before, "2.2") == [
        f"| 2.2 | the causal mask | {old:g} |", f"points: {old:g}",
        f"### Task 2.2 ({points_words(old)})"]
    assert _task_facts(after, "2.2") == [
        f"| 2.2 | the causal mask | {new:g} |", f"points: {new:g}",
        f"### Task 2.2 ({points_words(new)})"]
    assert not any(re.search(rf"(?<![\d.]){re.escape(f'{old:g}')}(?![\d.])",
                             line) for line in _task_facts(after, "2.2"))
    config = [yaml.safe_load(c.source) for c in after.cells
              if c.source.startswith("# BEGIN QUESTION\nname: task_2_2")]
    assert config[0]["points"] == new
    # Every other cell is the same.
    changed = [i for i, (a, b) in enumerate(zip(before.cells, after.cells))
               if a.source != b.source]
    assert len(changed) == 3


def test_a_question_given_points_says_them_where_students_read(tmp_path):
    """The intro's table and the prompt show a scored question's points;
    an unscored one stays feedback only."""
    def said(built: nbformat.NotebookNode) -> tuple[list[str], list[str]]:
        rows = [line for c in built.cells for line in c.source.split("\n")
                if line.startswith("| Q1-Q5 |")]
        scored = [c.source.split("\n")[0][:40] for c in built.cells
                  if c.source.endswith("scored by the staff.)*")]
        return rows, scored
    assert said(notebook.build()) == (
        ["| Q1-Q5 | your answers to the questions | none (feedback only) |"],
        [])
    copy = _source_copy(tmp_path, '+++ {"question": "Q2"}',
                        '+++ {"question": "Q2", "points": 2}')
    rows, scored = said(notebook.build(copy))
    assert rows == ["| Q1-Q5 | your answers to the questions | Q2: 2 "
                    "(scored by the staff) |"]
    q2 = [c for c in notebook.build(copy).cells
          if c.source.endswith("*(2 points, scored by the staff.)*")]
    assert len(q2) == 1 and len(scored) == 1
    before = [c.source for c in notebook.build().cells]
    assert q2[0].source.rsplit("\n\n", 1)[0] in before


def test_the_bonus_is_stated_as_the_rubric_says():
    rubric = load_rubric()
    bonuses = [b for t in rubric.tasks for b in t.bonuses]
    assert bonuses
    text = "\n".join(c.source for c in notebook.build().cells)
    for bonus in bonuses:
        assert bonus.title in text


# -- notation and placeholders ---------------------------------------------

def _source_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = homework.staff().notebook_source.read_text(encoding="utf-8")
    assert old in text, old
    copy = tmp_path / "attention.md"
    copy.write_text(text.replace(old, new, 1))
    shutil.copytree(homework.staff().notebook_source.parent / "figures",
                    tmp_path / "figures")
    return copy


def _line(path: Path, needle: str) -> int:
    text = path.read_text(encoding="utf-8")
    return text[:text.index(needle)].count("\n") + 1


@pytest.mark.parametrize("placeholder, message", [
    ("{{ point 1.1 }}", "unknown placeholder '{{ point 1.1 }}'"),
    ("{{ points 9.9 }}", "no task '9.9' in the rubric"),
    ("{{ points }}", "'{{ points }}': points takes 1 argument(s)"),
])
def test_a_bad_placeholder_names_its_line(tmp_path, placeholder, message):
    copy = _source_copy(tmp_path, "{{ points 1.1 }}", placeholder)
    line = _line(copy, placeholder)
    with pytest.raises(notebook.MasterError,
                       match=rf"attention.md:{line}: .*{re.escape(message)}"):
        notebook.build(copy)


def test_a_question_without_its_sample_names_its_line(tmp_path):
    copy = _source_copy(tmp_path, '+++ {"sample": "Q2"}', "+++")
    line = _line(copy, '+++ {"question": "Q2"')   # points may follow
    with pytest.raises(notebook.MasterError,
                       match=rf"attention.md:{line}: question Q2 needs"):
        notebook.build(copy)


def test_a_task_unknown_to_the_rubric_names_its_line(tmp_path):
    # 9.9: a task id no rubric will have (4.1 was one, until it was added).
    unknown = "9.9"
    assert not any(item.id.startswith(unknown)
                   for task in load_rubric().tasks for item in task.items)
    copy = _source_copy(tmp_path, '+++ {"task": "3.4"}',
                        f'+++ {{"task": "{unknown}"}}')
    line = _line(copy, f'+++ {{"task": "{unknown}"}}')
    with pytest.raises(notebook.MasterError,
                       match=rf"attention.md:{line}: no task '{unknown}'"):
        notebook.build(copy)


def test_shape_notation_comes_from_one_function(monkeypatch):
    table = "| dimension | names |\n|---|---|\n| batch size | `b` |"
    from autograder import homework
    from autograder.checks.shape_notation import notation_of
    text = "\n".join(c.source for c in notebook.build().cells)
    # The notebook promises exactly what the grader's parser reads.
    assert notation_of(homework.current()).markdown().strip() in text
    assert "shape-notation" not in text
    monkeypatch.setattr(notebook, "shape_notation", lambda _: table)
    text = "\n".join(c.source for c in notebook.build().cells)
    assert table in text
    assert "`batch_size`, `bs`" not in text


def test_max_score_and_notes():
    rubric = load_rubric()
    assert notebook.fill_facts("of {{ max_score }} points", rubric,
                               "x") == f"of {rubric.max_score:g} points"
    nb = notebook.build()
    assert not any("Instructor notes" in c.source for c in nb.cells)
    assert "Instructor notes" in homework.staff().notebook_source.read_text()


def test_the_source_is_as_jupytext_writes_it():
    # A save from JupyterLab (jupytext) then leaves the file as it is, so
    # its diff shows only what the instructor changed.
    import jupytext

    def canonical(text: str) -> str:  # the header names jupytext's version
        return re.sub(r"(?m)^ *jupytext_version: .*\n", "", text)

    text = homework.staff().notebook_source.read_text(encoding="utf-8")
    assert canonical(jupytext.writes(jupytext.reads(text, fmt="md:myst"),
                                     fmt="md:myst")) == canonical(text)
