"""``make test-fresh``: the README's quick start on a minimal Debian, timed.

Builds (once, cached) a ``debootstrap --variant=minbase bookworm`` root from
this machine's own apt mirror, copies it to ``build/fresh/root``, copies the
checkout's git-tracked files to ``/root/kit`` (mode 700) and to a normal
user's ``~/kit``, and runs the README's quick-start block verbatim: its
``apt-get`` line once as root, every other line as root in ``/root/kit``,
then as the user in ``~/kit``. ``--quick-start-only`` leaves out the suite
(the block's ``make test...`` lines). Prints the time of every step.

Then the student's walk (``--no-student`` leaves it out, ``--student-only``
runs it alone), in a second fresh root: ``dist/student.zip`` (built here,
unverified) unzipped in the user's home, and only the packages of the
student README's ``apt-get install`` line. First without its venv package
(``make install`` must stop naming ``python3.X-venv``), then with all of
them: ``make install`` (no ``rm`` in between), ``make check`` (the skeleton
scores 0, the reference, given as ``FILE=``, full marks) and ``make test``
on the reference.

Each step runs in its own mount and PID namespace whose ``/`` is the new
root, bind-mounted onto itself and entered with ``pivot_root`` (not
``chroot``): ``/`` is a mount point as on a real machine, and the user may
create user namespaces (the kernel refuses them to a chrooted process).
pip's configuration is carried in (its config files, the ``PIP_*``
variables and the files they name, copied; the local folders they name,
bound read-only), so pip resolves as it does here. Needs root,
debootstrap and util-linux.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
USER = "student"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) \
    / "attention-kit-fresh"
KEEP_ENV = ("TERM", "TORCH_INDEX", "http_proxy", "https_proxy", "no_proxy",
            "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def quick_start(readme: str) -> list[str]:
    """The command lines of the README's quick-start ``bash`` block."""
    section = readme.split("## Quick start", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def is_suite(line: str) -> bool:
    """Whether a quick-start line runs the kit's test suite."""
    return re.match(r"\s*make\s+test", line) is not None


def steps(lines: list[str], quick_start_only: bool = False
          ) -> list[tuple[str, str, str]]:
    """(user, folder, line) to run: the apt line as root, the quick start
    as root in /root/kit and as the user in ~/kit, then the suites in the
    same order (the quick-start half is known even if a suite fails)."""
    plan = [("root", "/", line) for line in lines if "apt-get" in line]
    for suite in (False, True):
        for user, cwd in (("root", "/root/kit"), (USER, "~/kit")):
            plan += [(user, cwd, line) for line in lines
                     if "apt-get" not in line and is_suite(line) == suite
                     and not (suite and quick_start_only)]
    return plan


STUDENT_README = ROOT / "kit" / "student" / "README.md"
APT = ("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get "
       "install -y -qq --no-install-recommends ")


def student_walk(readme: str) -> list[tuple[str, str, str]]:
    """(user, folder, line) of the student's walk (see the module doc):
    the packages are the student README's first ``apt-get install`` line
    (sudo dropped: minimal Debian has none; steps run as root)."""
    sys.path.insert(0, str(ROOT / "kit"))
    try:
        from system_deps import readme_packages
    finally:
        sys.path.remove(str(ROOT / "kit"))
    from autograder import homework
    packages = readme_packages(readme)
    without_venv = [p for p in packages if not p.endswith("-venv")]
    home = f"~/{homework.current().release_folder}"
    full = r'grep -Eq "public: ([0-9.]+) / \1 points"'
    return [
        ("root", "/", APT + " ".join(without_venv)),
        (USER, "~", "unzip -q student.zip"),
        # the Debian venv trap: stopped, named, nothing half-made reused
        (USER, home, "! make install > install-1.log 2>&1 && cat "
                     "install-1.log && grep -q 'apt-get install "
                     "python3\\.[0-9]*-venv' install-1.log"),
        ("root", "/", APT + " ".join(packages)),
        (USER, home, "make install"),
        (USER, home, "make check | tee check-skeleton.log; "
                     "grep -q 'public: 0 / ' check-skeleton.log"),
        (USER, home, "make check FILE=$HOME/reference.py | tee "
                     f"check-reference.log; {full} check-reference.log"),
        (USER, home, "HOMEWORK_IMPL=$HOME/reference.py make test"),
    ]


def debian_mirror(etc: Path = Path("/etc/apt")) -> str:
    """The first Debian archive URI of this machine's apt sources."""
    texts = [p.read_text() for p in [etc / "sources.list",
                                     *sorted((etc / "sources.list.d")
                                             .glob("*.sources")),
                                     *sorted((etc / "sources.list.d")
                                             .glob("*.list"))]
             if p.is_file()]
    for text in texts:
        for uri in re.findall(r"^(?:URIs:|deb)\s+(?:\[[^]]*\]\s+)?(\S+)",
                              text, re.MULTILINE):
            if re.search(r"/debian/?$", uri):
                return uri
    return "http://deb.debian.org/debian"


def pip_carry(python: str) -> tuple[list[Path], dict[str, str], list[Path]]:
    """pip's config files, ``PIP_*`` variables and the local paths they name.

    Read from ``pip config debug`` of ``python`` (files that exist) and the
    environment; a path is any absolute path or ``file://`` URL in them that
    exists on this machine.
    """
    debug = subprocess.run([python, "-m", "pip", "config", "debug"],
                           capture_output=True, text=True).stdout
    files = [Path(m) for m in re.findall(r"^\s+(/\S+), exists: True",
                                         debug, re.MULTILINE)]
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    text = "\n".join([*(f.read_text() for f in files), *env.values()])
    named = {Path(p.rstrip("/")) for p in re.findall(
        r"(?:file://|(?<![\w:/.]))(/[\w./+-]+)", text)}
    # A PEP 503 index's pages link to files beside "simple": bind its parent.
    named = {p.parent if p.name == "simple" else p for p in named}
    paths = sorted(p for p in named if p.exists() and p != Path("/"))
    return files, env, paths


def failure_excerpt(log: str, head: int = 80, tail: int = 20) -> str:
    """What a failed step's log shows CI: pytest's failure tracebacks (the
    first ``head`` lines of its FAILURES section), then the log's last
    ``tail`` lines. CI prints only part of the output, and a suite's last
    lines are its timing table and summary, which name a failed test but
    not why it failed."""
    lines = log.splitlines(True)
    start = next((i for i, line in enumerate(lines)
                  if re.match(r"=+ FAILURES =+$", line.strip())), None)
    if start is None:
        return "".join(lines[-(head + tail):])
    failures = lines[start:start + head]
    rest = lines[max(start + head, len(lines) - tail):]
    cut = len(lines) - tail - (start + head)
    return "".join(failures + ([f"[... {cut} lines]\n"] if cut > 0 else [])
                   + rest)


def _run(argv: list, **kw) -> None:
    subprocess.run([str(a) for a in argv], check=True, **kw)


def base_root(log) -> Path:
    """The cached minimal Debian root (debootstrap'd on first use)."""
    base = CACHE / f"{SUITE}-minbase"
    if not base.is_dir():
        tmp = base.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        mirror = debian_mirror()
        log(f"debootstrap --variant=minbase {SUITE} from {mirror}")
        _run(["debootstrap", "--variant=minbase", SUITE, tmp, mirror],
             stdout=subprocess.DEVNULL)
        tmp.rename(base)
    return base


def prepare(root: Path, python: str) -> dict[str, str]:
    """Fill ``root`` from the cache; apt sources, pip config, user, kit.

    Returns the ``PIP_*`` variables every step gets.
    """
    _run(["cp", "-a", "--reflink=auto", base_root(print), root])
    apt = Path("/etc/apt")
    sources = [p for p in [apt / "sources.list",
                           *(apt / "sources.list.d").glob("*.sources"),
                           *(apt / "sources.list.d").glob("*.list")]
               if p.is_file()]
    if sources:   # this machine's mirror, not debootstrap's default
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        for path in sources:
            shutil.copy(path, root / str(path).lstrip("/"))
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    files, env, _ = pip_carry(python)
    _run(["chroot", root, "useradd", "--create-home", "--shell",
          "/bin/bash", USER])
    uid, gid = _ids(root, USER)
    home = Path(f"/home/{USER}")
    for path in files:
        target = root / str(path).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        if str(path).startswith(str(Path.home()) + "/"):   # a user file
            mine = root / str(home / path.relative_to(Path.home()))\
                .lstrip("/")
            mine.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, mine)
            _run(["chroot", root, "chown", "-R", f"{uid}:{gid}",
                  home / path.relative_to(Path.home()).parts[0]])
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout.decode()
    for kit, owner in ((root / "root/kit", None),
                       (root / str(home / "kit").lstrip("/"), (uid, gid))):
        for name in filter(None, tracked.split("\0")):
            if (ROOT / name).is_file():
                (kit / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, kit / name)
        if owner:
            _run(["chown", "-R", f"{uid}:{gid}", kit])
        else:
            kit.chmod(0o700)
    return env


def give_student(root: Path, archive: Path) -> None:
    """Put ``student.zip`` and the reference (as ``reference.py``) in the
    user's home, owned by the user."""
    from autograder import homework
    uid, gid = _ids(root, USER)
    home = root / "home" / USER
    for source, name in ((archive, "student.zip"),
                         (homework.staff().reference, "reference.py")):
        shutil.copy(source, home / name)
        os.chown(home / name, uid, gid)


def _ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise KeyError(user)


def step(root: Path, user: str, cwd: str, line: str, env: dict[str, str],
         log_file: Path, python: str) -> tuple[int, float]:
    """Run ``line`` with bash as ``user`` in ``cwd`` inside ``root``.

    Returns the exit status and the seconds it took; output goes to
    ``log_file``.
    """
    named = pip_carry(python)[2]
    for path in named:   # files (a CA bundle, constraints) are copied before
        if path.is_file():   # every step: apt's ca-certificates rewrites the
            target = root / str(path).lstrip("/")   # bundle without the
            target.parent.mkdir(parents=True, exist_ok=True)   # local CA
            shutil.copy(path, target)
    binds = [str(p) for p in named if p.is_dir()]   # bound read-only
    argv = ["unshare", "--mount", "--pid", "--fork", "--propagation",
            "private", "--", sys.executable, __file__, "--inside", str(root),
            "--user", user, "--cwd", cwd, *sum((["--bind", b]
                                                for b in binds), []),
            "--", line]
    full = {**{k: os.environ[k] for k in KEEP_ENV if k in os.environ},
            **env, "PATH": os.environ["PATH"]}
    start = time.monotonic()
    with open(log_file, "wb") as out:
        status = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT,
                                 env=full, stdin=subprocess.DEVNULL)
    return status, time.monotonic() - start


def inside(root: str, user: str, cwd: str, binds: list[str],
           line: str) -> None:
    """In the new namespaces: make ``root`` the machine's ``/``, run line."""
    def mount(*args: str) -> None:
        _run(["mount", *args])
    mount("--bind", root, root)
    for source in binds:
        target = root + source
        os.makedirs(target, exist_ok=True)
        mount("--bind", source, target)
        mount("-o", "remount,bind,ro", target)
    mount("-t", "proc", "proc", root + "/proc")
    mount("--rbind", "/dev", root + "/dev")
    mount("--rbind", "/sys", root + "/sys")
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", root + "/run")
    os.chdir(root)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(155, b".", b".") != 0:   # SYS_pivot_root on x86-64
        raise OSError(ctypes.get_errno(), "pivot_root")
    if libc.umount2(b".", 2) != 0:           # MNT_DETACH the old root
        raise OSError(ctypes.get_errno(), "umount2")
    os.chdir("/")
    uid, gid = _ids(Path("/"), user)
    home = "/root" if uid == 0 else f"/home/{user}"
    env = {k: v for k, v in os.environ.items()
           if k.startswith("PIP_") or k in KEEP_ENV}
    env.update(HOME=home, USER=user, LOGNAME=user, LANG="C.UTF-8",
               SHELL="/bin/bash",
               PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                    "/sbin:/bin")
    if uid:
        env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        os.initgroups(user, gid)
        os.setgid(gid)
        os.setuid(uid)
    os.chdir(cwd.replace("~", home))
    os.execve("/bin/bash", ["bash", "-c", line], env)


def remove(root: Path) -> None:
    """Delete ``root``, unless something is mounted under it here (a bound
    host folder would be deleted through it): then say so and keep it."""
    mounts = [line.split()[4] for line in
              Path("/proc/self/mountinfo").read_text().splitlines()]
    inside_root = [m for m in mounts if m == str(root)
                   or m.startswith(str(root) + "/")]
    if inside_root:
        print(f"test-fresh: kept {root}: mounted there: {inside_root}",
              file=sys.stderr)
        return
    shutil.rmtree(root, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kit.machine.fresh_machine",
        description=__doc__.splitlines()[0])
    parser.add_argument("--quick-start-only", action="store_true",
                        help="leave out the suite (the make test lines)")
    parser.add_argument("--keep", action="store_true",
                        help="keep build/fresh/root afterwards")
    parser.add_argument("--no-student", action="store_true",
                        help="leave out the student's walk")
    parser.add_argument("--student-only", action="store_true",
                        help="only the student's walk")
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    parser.add_argument("--user", help=argparse.SUPPRESS)
    parser.add_argument("--cwd", help=argparse.SUPPRESS)
    parser.add_argument("--bind", action="append", default=[],
                        help=argparse.SUPPRESS)
    parser.add_argument("line", nargs="*", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build the root, run the quick start as root and as a user, timed."""
    args = _parser().parse_args(argv)
    if args.inside:
        inside(args.inside, args.user, args.cwd, args.bind,
               " ".join(args.line))
    missing = [c for c in ("debootstrap", "unshare", "mount", "chroot")
               if shutil.which(c) is None]
    if os.geteuid() != 0 or missing:
        why = (f"missing: {', '.join(missing)}; apt-get install "
               "debootstrap" if missing else "run as root")
        print("test-fresh: needs root and the commands debootstrap, "
              f"unshare, mount, chroot ({why})", file=sys.stderr)
        return 2
    lines = quick_start((ROOT / "README.md").read_text())
    work = ROOT / "build" / "fresh"
    root, logs = work / "root", work / "logs"
    remove(root)
    if root.exists():
        return 2
    shutil.rmtree(work, ignore_errors=True)
    logs.mkdir(parents=True)
    python = sys.executable
    timings: list[tuple[str, str, float, int]] = []
    start = time.monotonic()
    cached = (CACHE / f"{SUITE}-minbase").is_dir()
    env = prepare(root, python)
    timings.append(("root", "minimal Debian root" + (
        " (cached debootstrap)" if cached else " (debootstrap)"),
        time.monotonic() - start, 0))
    plan = [] if args.student_only else steps(
        lines, args.quick_start_only)
    walk = [] if args.no_student else student_walk(
        STUDENT_README.read_text())
    status = 0
    number = 0
    try:
        for phase, todo in (("kit", plan), ("student", walk)):
            if phase == "student" and todo:
                if plan:   # the student's machine is a fresh one
                    remove(root)
                    if root.exists():
                        return 2
                    env = prepare(root, python)
                started = time.monotonic()
                from kit.release.student import build
                archive = build(work / "dist", python, verify=False)[1]
                give_student(root, archive)
                timings.append(("student", "dist/student.zip (unverified)",
                                time.monotonic() - started, 0))
            for user, cwd, line in todo:
                number += 1
                log = logs / f"{number:02d}-{user}.log"
                print(f"test-fresh: [{phase}: {user} in {cwd}] $ {line}",
                      flush=True)
                code, seconds = step(root, user, cwd, line, env, log,
                                     python)
                timings.append((user, line, seconds, code))
                print(f"test-fresh:   exit {code} in {seconds:.0f} s "
                      f"(log {log.relative_to(ROOT)})", flush=True)
                if code:
                    print(failure_excerpt(log.read_text(errors="replace")),
                          file=sys.stderr)
                    status = 1
                    if phase == "student" or not is_suite(line):
                        break   # a failed kit suite stops nothing: the
                        # other user's suite still runs
    finally:
        if not args.keep:
            remove(root)
    print("\ntest-fresh: minimal Debian " + SUITE + ", README quick start"
          + (" (suite left out)" if args.quick_start_only else "")
          + ("" if args.no_student else ", student walk"))
    for user, what, seconds, code in timings:
        mark = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"  {seconds:7.0f} s  {user:8} {what}  {mark}")
    print(f"  {time.monotonic() - start:7.0f} s  total")
    return status


if __name__ == "__main__":
    sys.exit(main())
