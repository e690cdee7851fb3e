"""The memory the machine's cgroup leaves a worker, and its OOM kills.

A container (Gradescope's is 768 MB) limits the memory of all its
processes together. A worker whose own limit is larger than what the
container has left is killed by the kernel's OOM killer before it reaches
that limit, and the student would read a crash. So the parent gives each
worker at most what the cgroup has left minus room for itself
(``worker_allowance_mb``). A worker killed while the cgroup's OOM kill
count rises (``oom_kills``) stayed inside its own limit (over it, an
allocation fails instead): the machine ran out, which is the grader's
failure, never the submission's. Before grading, ``check_room`` refuses a
machine whose memory cannot hold the parent and one worker.

Both cgroup versions are read: v2 ``memory.max``/``memory.current``/
``memory.events``, v1 ``memory.limit_in_bytes``/``memory.usage_in_bytes``/
``memory.oom_control``, in the process's own cgroup and every ancestor up
to the mount (a limit may be set on any of them).
"""
from __future__ import annotations

from pathlib import Path

PARENT_RESERVE_MB = 128   # what the grading parent may still need
# The grading parent with torch, its fork server and the test values: a
# `grade --jobs 1` of the reference in a memory cgroup peaks near 300 MB,
# of which about 200 are the parent's (the rest, one worker's).
PARENT_MB = 200
MIN_WORKER_MB = 128       # below this the worker could not import torch
_UNLIMITED = 1 << 60      # v1 reports "no limit" as a huge number
_MIB = 1024 * 1024


def cgroup_folders(proc: Path = Path("/proc/self")) -> list[Path]:
    """The folders of this process's memory cgroup, its own first, then
    each ancestor up to the hierarchy's mount point; [] when there is no
    memory controller (or not Linux)."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    paths = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") or [""]:
                paths[controller] = parts[2]
    for mount in mounts:
        left, _, right = mount.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point, fstype = fields[3], fields[4], tail[0]
        if fstype == "cgroup" and "memory" in tail[2].split(","):
            own, limit_file = paths.get("memory"), "memory.limit_in_bytes"
        elif fstype == "cgroup2":
            own, limit_file = paths.get(""), "memory.max"
        else:
            continue
        folders = _chain(Path(point), root, own)
        if folders and (folders[0] / limit_file).exists():
            return folders
    return []


def _chain(point: Path, root: str, own: str | None) -> list[Path]:
    if own is None:
        return []
    relative = Path(own).relative_to(root) if own.startswith(root) \
        else Path(own.lstrip("/"))
    folder = point / relative
    folders = [folder]
    while folder != point and point in folder.parents:
        folder = folder.parent
        folders.append(folder)
    return folders


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max" or not text.isdigit():
        return None
    value = int(text)
    return value if value < _UNLIMITED else None


def headroom_bytes(folders: list[Path] | None = None) -> int | None:
    """Bytes the cgroup can still charge before a limit is reached (the
    tightest of the chain), or None when nothing limits it."""
    folders = cgroup_folders() if folders is None else folders
    room = None
    for folder in folders:
        for limit_name, usage_name in (("memory.max", "memory.current"),
                                       ("memory.limit_in_bytes",
                                        "memory.usage_in_bytes")):
            limit = _read_int(folder / limit_name)
            if limit is None:
                continue
            usage = _read_int(folder / usage_name) or 0
            left = max(0, limit - usage)
            room = left if room is None else min(room, left)
    return room


class MemoryShortage(Exception):
    """The machine or container has too little memory to grade; the
    message gives the figures and the remedy."""


def memory_budget(folders: list[Path] | None = None,
                  meminfo: Path = Path("/proc/meminfo"),
                  status: Path = Path("/proc/self/status")
                  ) -> tuple[int, int] | None:
    """(allowed, used) bytes: the limit of the cgroup with the least room
    left and that group's usage (its working set: file pages the kernel
    would drop first, ``inactive_file``, are not counted); with no limit,
    MemAvailable plus this process's resident memory, and that memory;
    None when unknown."""
    folders = cgroup_folders() if folders is None else folders
    best = None
    for folder in folders:
        for limit_name, usage_name, inactive in (
                ("memory.max", "memory.current", "inactive_file"),
                ("memory.limit_in_bytes", "memory.usage_in_bytes",
                 "total_inactive_file")):
            limit = _read_int(folder / limit_name)
            if limit is None:
                continue
            usage = _read_int(folder / usage_name) or 0
            usage -= min(usage, _stat(folder / "memory.stat", inactive))
            if best is None or limit - usage < best[0] - best[1]:
                best = (limit, usage)
    if best is not None:
        return best
    available = _meminfo_kib(meminfo, "MemAvailable:")
    resident = _meminfo_kib(status, "VmRSS:") or 0
    if available is None:
        return None
    return (available + resident) * 1024, resident * 1024


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _meminfo_kib(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key) and line.split()[1].isdigit():
                return int(line.split()[1])
    except (OSError, IndexError):
        pass
    return None


def check_room(folders: list[Path] | None = None, *,
               grow_mb: int = PARENT_RESERVE_MB, **where: Path) -> None:
    """Raise MemoryShortage unless the memory this process may use holds
    what it uses now plus what the parent will add (``grow_mb``: room to
    grow once it is running; ``PARENT_MB`` before it loaded anything) and
    one worker (``MIN_WORKER_MB``): below that, the kernel would kill
    workers (or the grader) mid-batch. ``where``: ``memory_budget``'s
    files."""
    budget = memory_budget(folders, **where)
    if budget is None:
        return
    allowed, used = budget[0] // _MIB, budget[1] // _MIB
    parent = used + grow_mb
    need = parent + MIN_WORKER_MB
    if need > allowed:
        raise MemoryShortage(
            f"the grader needs about {need} MB (parent {parent} + worker "
            f"{MIN_WORKER_MB}); this machine/container allows {allowed} "
            f"MB, of which {used} MB are in use: give it more memory "
            f"(Gradescope's default container has 768 MB) or stop what "
            f"else runs there; no score was written")


def worker_allowance_mb(requested_mb: int,
                        folders: list[Path] | None = None,
                        share: int = 1) -> int:
    """The memory (MiB) a worker may add to its size at start: what was
    asked, or less where the cgroup could not hold it beside the parent.
    ``share``: how many workers may run at once (``grade --jobs``); each
    gets that part of the room, so that together they fit too."""
    room = headroom_bytes(folders)
    if room is None:
        return requested_mb
    fits = (room // _MIB - PARENT_RESERVE_MB) // max(1, share)
    return min(requested_mb, max(MIN_WORKER_MB, fits))


def oom_kills(folders: list[Path] | None = None) -> int:
    """How many processes the kernel's OOM killer has killed in this
    cgroup and its ancestors so far (0 when unknown); compare two reads."""
    folders = cgroup_folders() if folders is None else folders
    total = 0
    for folder in folders:
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (folder / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    total += int(value)
    return total


__all__ = ["MemoryShortage", "cgroup_folders", "check_room",
           "headroom_bytes", "memory_budget", "oom_kills",
           "worker_allowance_mb"]
