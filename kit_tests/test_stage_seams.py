"""Seams between the grader's parts (jail, hidden output, escaping, batch,
stand-in heads, second calls, memory, the remembered canary): what one
part's behaviour does to another's."""
from __future__ import annotations

from autograder.staff import similarity
from autograder.staff.similarity import Pair

HIDDEN = "\u2062"      # INVISIBLE TIMES: renders as nothing
FLIP = "\u202e"        # RIGHT-TO-LEFT OVERRIDE: reorders what follows


def test_similarity_pages_write_invisible_characters_out(tmp_path):
    """escape's seam (mdsafe.html_text) on batch's similarity pages: a
    TA sees a hidden character in the code or a submission's name."""
    a, b = f"alice{FLIP}gpj.exe", "bob<script>"
    code = f"x = a {HIDDEN}* b\ny = x\n"
    pair = Pair(a, b, 0.9, 4.0, 99.0, detail=([(0, 5)], [(0, 5)]))
    links = similarity.write_side_by_side(tmp_path, [pair],
                                          {a: code, b: code})
    page = (tmp_path / links[(a, b)]).read_text()
    assert HIDDEN not in page and FLIP not in page
    assert "&lt;U+2062&gt;" in page and "&lt;U+202E&gt;" in page
    assert "<script>" not in page and "<mark>x = a</mark>" in page
    rows = similarity._rows([pair], links, {})
    assert FLIP not in rows and "&lt;U+202E&gt;" in rows


def test_a_remembered_canary_leaves_the_sandbox_as_the_real_one(
        tmp_path, monkeypatch):
    """perf's canary cache and jail's named causes: a cached canary
    restores the fallback and the refused layers, so describe_jail says
    the same thing after a cached check as after a real one."""
    from autograder.sandbox import preflight

    class Fake:
        def __init__(self):
            self.user, self.readable = (65534, 65534), ["/usr"]
            self.namespaces, self.landlock = True, True
            self.layers, self.refused, self.fallback = [], [], ""

    def real(sandbox, timeout=60.0):
        sandbox.namespaces = False
        sandbox.fallback = "the jail's namespaces could not be built (x)"
        sandbox.refused = ["namespaces: turned off for this sandbox"]
        sandbox.layers = ["uid-drop", "landlock"]
        return list(sandbox.layers)
    monkeypatch.setattr(preflight, "run_preflight", real)
    first, cached = Fake(), Fake()
    layers = preflight.remembered_preflight(first, folder=tmp_path)
    monkeypatch.setattr(preflight, "run_preflight", None)   # must not run
    assert preflight.remembered_preflight(cached, folder=tmp_path) == layers
    assert vars(cached) == vars(first)
    assert preflight.describe_jail(cached, layers) == \
        preflight.describe_jail(first, layers)


def test_failure_pages_write_invisible_characters_out(tmp_path,
                                                      monkeypatch):
    """batch's "not computed" / "not written" pages quote an exception,
    which may name a submission's file: through the HTML seam too."""
    from autograder.staff import class_report
    from autograder import graded_folder
    from autograder.report import layout
    (layout.submission_dir(tmp_path, "alice")).mkdir(parents=True)

    def broken(*args, **kwargs):
        raise OSError(f"cannot read alice{FLIP}gpj.py")
    monkeypatch.setattr(similarity, "report_section", broken)
    page = class_report.write_report(tmp_path, {}).read_text()
    assert "Not computed: OSError" in page
    assert FLIP not in page and "&lt;U+202E&gt;" in page
    monkeypatch.setattr(class_report, "write_report", broken)
    assert "not written" in graded_folder.write_class_report(tmp_path, {})
    page = (tmp_path / class_report.REPORT_NAME).read_text()
    assert FLIP not in page and "&lt;U+202E&gt;" in page


def test_forget_drops_the_entry_of_a_fallen_back_sandbox(tmp_path,
                                                         monkeypatch):
    """perf's forget_preflight after the namespace fallback: cmd_check
    forgets with the same sandbox, whose namespaces the fallback (or the
    cached entry) turned off, which changes environment_key; the entry
    it remembered must still go, or a check whose grading failed in the
    grader's code keeps skipping the canary."""
    from autograder.sandbox import preflight
    runs = []

    class Fake:
        def __init__(self):
            self.user, self.readable = (65534, 65534), ["/usr"]
            self.namespaces, self.landlock = True, True

    def real(sandbox, timeout=60.0):
        runs.append(sandbox)
        sandbox.namespaces = False     # the fallback
        return ["uid-drop", "landlock"]
    monkeypatch.setattr(preflight, "run_preflight", real)
    for _ in range(2):    # a real run, then a cached one
        sandbox = Fake()
        preflight.remembered_preflight(sandbox, folder=tmp_path)
        preflight.forget_preflight(sandbox, folder=tmp_path)
    assert len(runs) == 2


class _Dead:
    """A worker process that has ended with ``exitcode``."""

    def __init__(self, exitcode: int):
        self.exitcode, self.pid = exitcode, None

    def join(self, timeout=None):
        return None


def _death(exitcode: int, tmp_path, monkeypatch, oom_before: int = 0,
           oom_after: int = 1):
    from autograder.sandbox import memlimit, supervisor
    from autograder.sandbox.protocol import Probe
    attempt = object.__new__(supervisor.Attempt)
    attempt.process, attempt.workdir = _Dead(exitcode), str(tmp_path)
    attempt.imported, attempt.oom_kills = True, oom_before
    attempt.memory_mb = 512
    monkeypatch.setattr(memlimit, "oom_kills", lambda *a: oom_after)
    return attempt._death(Probe("p", "M", {}))


def test_another_workers_oom_kill_is_not_this_ones_memory(tmp_path,
                                                          monkeypatch):
    """perf's cgroup OOM count with batch's --jobs: the count is the
    whole container's, so while one submission's worker is OOM-killed,
    another that exits or segfaults is a crash, not "use less memory"
    (and the OOM-killed one is the grader's failure, no score)."""
    import signal
    from autograder.sandbox.protocol import CRASH, ENVIRONMENT, MEMORY
    exited = _death(3, tmp_path, monkeypatch)
    assert exited.status == CRASH and "exited (code 3)" in exited.message
    segv = _death(-signal.SIGSEGV, tmp_path, monkeypatch)
    assert segv.status == CRASH and "SIGSEGV" in segv.message
    killed = _death(-signal.SIGKILL, tmp_path, monkeypatch)
    assert killed.status == ENVIRONMENT and "out-of-memory killer" in \
        killed.message
    quiet = _death(-signal.SIGKILL, tmp_path, monkeypatch, oom_after=0)
    assert quiet.status == MEMORY and "out-of-memory killer" not in \
        quiet.message


def test_a_stand_in_probe_makes_no_second_call():
    """calls' second call (batch reversed) and cascade's stand-ins (which
    accept only the probe's own x): together a correct wrapper would fail
    its second call, so a stand-in probe is called once."""
    from dataclasses import replace

    from autograder.sandbox.probe_runner import run_probe
    from autograder.sandbox.student_module import load_module
    from autograder.checks import heads
    from autograder.rubric import load_rubric
    from autograder.values import load_cases
    from kit import variants
    case = next(c for c in load_cases() if c.name == "mhw_small")
    check = next(c for c in load_rubric().checks() if c.id == "3.2")
    probe = replace(heads.ConcatenatedHeads._stand_in_probe(check, case),
                    again=True)
    module = load_module(variants.REFERENCE.read_text(),
                         "reference.py", name="review_stand_in")
    result = run_probe(module, probe, "reference.py")
    assert result.ok, result.message
    assert result.again is None and result.changed == []


def test_jobs_share_the_containers_memory(monkeypatch):
    """perf's allowance (what the cgroup has left) with batch's --jobs:
    each of the workers that may run at once gets its part, so that
    together they fit beside the parent; otherwise the kernel's OOM
    killer picks the largest process, perhaps the parent or another
    submission's worker."""
    import shutil
    from types import SimpleNamespace

    from autograder.sandbox import memlimit
    from autograder.sandbox.pool import Sandbox
    room = 1000 - memlimit.PARENT_RESERVE_MB
    monkeypatch.setattr(memlimit, "headroom_bytes",
                        lambda folders=None: 1000 * 2 ** 20)
    assert memlimit.worker_allowance_mb(1024) == room
    assert memlimit.worker_allowance_mb(1024, share=4) == \
        max(memlimit.MIN_WORKER_MB, room // 4)
    fake = SimpleNamespace(user=None, memory_mb=1024, output_limit=1000,
                           readable=[], namespaces=False, landlock=False,
                           jobs=4)
    settings = Sandbox._settings(fake, [], None, None)
    shutil.rmtree(settings.workdir)
    assert settings.memory_mb == room // 4
