"""The student release's notebook in JupyterLab, driven in a real browser
(Debian's chromium through Playwright), as a student has it.

The release is built, ``make notebook`` starts JupyterLab there (its own
command line, plus a loopback port, a token and no browser of its own),
the URL it prints is opened, and every cell is run: on the skeleton, then
with the reference copied in. Each check cell must show one clean verdict
(no otter frame, no traceback, wrapped at word boundaries) and no cell an
error. Screenshots of a failing and a passing check cell are kept in the
test's folder. Skips with the reason where chromium, Playwright or
JupyterLab is missing (.ci/run installs chromium; requirements-test.txt the
others).
"""
from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.rubric import load_rubric
from autograder.local import TASK_SCOPE, task_points
from kit.release import student as release

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISSING = [what for what, absent in (
    ("Debian's chromium (apt-get install chromium)", CHROMIUM is None),
    ("playwright (requirements-test.txt)",
     importlib.util.find_spec("playwright") is None),
    ("jupyterlab (requirements-test.txt)",
     importlib.util.find_spec("jupyterlab") is None)) if absent]
if MISSING:
    pytest.skip(f"needs {', '.join(MISSING)}", allow_module_level=True)

from playwright.sync_api import Page, sync_playwright  # noqa: E402

TASKS = tuple(task_points(load_rubric()))
RUN_SECONDS = 240     # one "Run All" on 2 busy cores


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def homework(tmp_path_factory) -> Path:
    """The unpacked student release (not self-graded: test_release.py
    does that)."""
    out = tmp_path_factory.mktemp("dist")
    folder, _ = release.build(out, verify=False)
    return folder


@pytest.fixture(scope="module")
def lab(homework, tmp_path_factory):
    """``make notebook`` in the release: (the URL it printed, its log)."""
    port, token = _free_port(), secrets.token_hex(16)
    log_path = tmp_path_factory.mktemp("lab") / "jupyterlab.log"
    args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port}"
            f" --ServerApp.port_retries=0 --IdentityProvider.token={token}"
            " --allow-root")
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(log_path.parent / "cfg"),
           "JUPYTER_RUNTIME_DIR": str(log_path.parent / "runtime")}
    env.pop("MPLBACKEND", None)   # the notebook's plots use its own
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            ["make", "--no-print-directory", "notebook",
             f"PY={sys.executable}", f"ARGS={args}"], cwd=homework,
            env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        deadline, url = time.monotonic() + 120, None
        while url is None and time.monotonic() < deadline:
            assert server.poll() is None, log_path.read_text()
            found = re.search(rf"http://127\.0\.0\.1:{port}/\S+",
                              log_path.read_text())
            url = found.group(0) if found else None
            time.sleep(0.5)
        assert url, f"JupyterLab printed no URL:\n{log_path.read_text()}"
        # a token given on the command line is printed as "..."
        yield url.replace("token=...", f"token={token}"), log_path
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def _prompts(page: Page) -> list[str]:
    """The input prompts of the code cells ("[3]:", "[*]:", "[ ]:")."""
    texts = page.locator(".jp-Notebook .jp-InputPrompt").all_text_contents()
    return [t.strip() for t in texts if t.strip()]


def _run_all(page: Page, code_cells: int, restart: bool) -> None:
    """Run every cell from the Run (or Kernel) menu and wait until each of
    the ``code_cells`` has run."""
    menu, item = ("Kernel", "Restart Kernel and Run All Cells…") \
        if restart else ("Run", "Run All Cells")
    # the kernel is up (a click before that may be lost)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(
        timeout=RUN_SECONDS * 1000)
    page.locator("#jp-MainMenu").get_by_text(menu, exact=True).click()
    page.get_by_text(item, exact=True).click()
    if restart:
        page.locator(".jp-Dialog .jp-mod-accept").click()
    deadline, started = time.monotonic() + RUN_SECONDS, False
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        started = started or "[*]:" in prompts
        done = [p for p in prompts if re.fullmatch(r"\[\d+\]:", p)]
        if started and len(done) == code_cells and "[*]:" not in prompts:
            return
        time.sleep(1)
    raise AssertionError(f"the cells did not finish in {RUN_SECONDS} s: "
                         f"{_prompts(page)}")


def _check_cells(page: Page) -> dict[str, object]:
    """Task -> its check cell."""
    cells = {}
    for task_id in TASKS:
        cell = page.locator(".jp-Notebook .jp-CodeCell").filter(
            has=page.locator(".jp-InputArea-editor",
                             has_text=f'check("{task_id}")'))
        assert cell.count() == 1, task_id
        cells[task_id] = cell
    return cells


def _assert_clean(page: Page, passing: bool, shots: Path, name: str
                  ) -> None:
    errors = page.locator(".jp-Notebook "
                          "[data-mime-type='application/vnd.jupyter.stderr']"
                          ", .jp-Notebook .jp-OutputArea-output"
                          "[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.all_text_contents()
    for task_id, cell in _check_cells(page).items():
        outputs = cell.locator(".jp-OutputArea-output")
        assert outputs.count() == 1, task_id
        text = outputs.text_content()
        assert text.count(f"Task {task_id}:") == 1, text
        assert TASK_SCOPE in " ".join(text.split())
        for frame in ("Test case failed", "Error at line", "Traceback",
                      "passed!"):
            assert frame not in text, text
        verdict = "passed on the public cases" if passing else \
            "not implemented yet"
        assert verdict in text, text
        style = outputs.locator("pre").evaluate(
            "e => getComputedStyle(e).wordBreak")
        assert style == "normal", style
    shown = _check_cells(page)["2.3"]
    shown.scroll_into_view_if_needed()
    shown.screenshot(path=str(shots / f"{name}-check-2.3.png"))


def test_the_notebook_runs_in_jupyterlab(lab, homework, tmp_path):
    url, log = lab
    # the printed URL opens the notebook (not the Launcher) in a JupyterLab
    # rooted at the homework folder, so the module opens there too
    assert "/lab/tree/assignment/attention.ipynb" in url, url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(
                timeout=120_000)
            assert page.locator(".jp-Launcher").count() == 0
            # as a file, in text: how JupyterLab's editor opens it (a
            # contents manager such as jupytext's would serve a notebook)
            module = page.request.get(url.replace(
                "/lab/tree/assignment/attention.ipynb",
                "/api/contents/transformer_lm/modeling_attention.py")
                + "&type=file&format=text")
            assert module.ok and "YOUR CODE STARTS HERE" in \
                module.json()["content"]
            code_cells = sum(c.cell_type == "code" for c in nbformat.read(
                str(homework / "assignment" / "attention.ipynb"), 4).cells)
            _run_all(page, code_cells, restart=False)
            _assert_clean(page, False, tmp_path, "skeleton")
            shutil.copy(REFERENCE, homework / "transformer_lm"
                        / "modeling_attention.py")
            _run_all(page, code_cells, restart=True)
            _assert_clean(page, True, tmp_path, "reference")
            page.screenshot(path=str(tmp_path / "reference-page.png"))
        finally:
            browser.close()
    print(f"screenshots: {tmp_path}")
