"""Prove the grader can grade here before it writes any score.

A known-correct canary submission runs through the real sandbox (same user,
limits and jail as a student's) and must send back the right numbers. If it
does not, the fault is the grader's environment (a Python the worker user
cannot read, a missing package, a jail that cannot be built), never a
student's: the caller stops with a configuration error and writes no score.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from autograder.sandbox import jail
from autograder.sandbox.protocol import OK, Probe, ProbeResult

# What the homework's submissions use: Linear, matmul, a causal mask,
# softmax, dropout in eval mode, view/transpose.
CANARY_SOURCE = '''\
import math

import torch
import torch.nn as nn


class Canary(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.qkv = nn.Linear(size, 3 * size)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(x.shape[-1])
        mask = torch.ones(x.shape[1], x.shape[1]).triu(1).bool()
        scores = scores.masked_fill(mask, float("-inf"))
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return (probs @ v).view(x.shape[0], -1).contiguous()
'''
CANARY_FILE = "canary_submission.py"
SIZE = 4


class PreflightError(Exception):
    """The grader cannot grade here; ``str(self)`` says why and what to do
    (``cause``: the failure alone)."""

    def __init__(self, message: str, cause: str = ""):
        super().__init__(message)
        self.cause = cause


@dataclass
class Canary:
    """The canary's probe and the answer it must give."""

    probe: Probe
    expected: torch.Tensor


def make_canary(timeout: float = 60.0) -> Canary:
    """The probe and its expected output, computed here (trusted code)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, SIZE, generator=generator)
    namespace: dict = {}
    exec(compile(CANARY_SOURCE, CANARY_FILE, "exec"), namespace)
    module = namespace["Canary"](SIZE).eval()
    state = {k: torch.randn(v.shape, generator=generator)
             for k, v in module.state_dict().items()}
    module.load_state_dict(state)
    with torch.no_grad():
        expected = module(x)
    probe = Probe("preflight", "Canary", {"size": SIZE}, state=state,
                  args=[x], timeout=timeout)
    return Canary(probe, expected)


def run_preflight(sandbox, timeout: float = 60.0) -> list[str]:
    """Run the canary through ``sandbox``; return the jail's active layers.
    Where the namespaces exist but the jail cannot be built in them (a
    container that allows unshare but not mount, a chroot whose / is no
    mount point), fall back to the layers without namespaces once, and
    record why in ``sandbox.fallback`` (the failing call and its errno).
    Raises PreflightError with the cause and the remedy; when the fallback
    fails too, it names both causes."""
    try:
        return _run_canary(sandbox, timeout)
    except PreflightError as error:
        if "lock up" not in str(error) or not getattr(sandbox, "namespaces",
                                                      False):
            raise
        first = error.cause
    sandbox.namespaces = False
    sandbox.fallback = (f"the jail's namespaces could not be built "
                        f"({first.split('lock up the worker: ')[-1]}"
                        f"{_namespace_hint(first)}); fell back to the "
                        f"layers without namespaces")
    return _run_canary(sandbox, timeout)


def prove_spare_uids(sandbox, timeout: float = 60.0) -> str:
    """Before workers run side by side as root: the canary once more, as
    a spare uid (the account held meanwhile), since the first proved the
    account's rights only. When it fails, the workers share the account
    (a fork bomb's processes then count against its neighbours, as before
    spare uids) and the returned warning says why; "" otherwise."""
    uids = getattr(sandbox, "uids", None)
    if uids is None or not uids.spare or sandbox.user != uids.account:
        return ""
    with uids.take():   # the account: this run gets a spare
        try:
            _run_canary(sandbox, timeout)
            return ""
        except PreflightError as error:
            cause = error.cause
    uids.spare = []
    return (f"the canary failed as a spare worker uid ({cause[:300]}), "
            f"so the workers share the account {_user_name(uids.account[0])}"
            f" (make the grader's Python readable by every user to give "
            f"each worker a uid of its own)")


def _namespace_hint(cause: str) -> str:
    if "mount('/'" in cause and "EINVAL" in cause or "pivot_root" in cause:
        return ("; / is not a mount point here, as in a plain chroot: "
                "bind-mount the root onto itself before entering it")
    return ""


def _run_canary(sandbox, timeout: float) -> list[str]:
    canary = make_canary(timeout)
    try:
        result = sandbox.run(CANARY_SOURCE, CANARY_FILE, [canary.probe])[0]
    except Exception as exc:   # noqa: BLE001 - any failure is the grader's
        raise PreflightError(_explain(sandbox, None, f"{exc}"),
                             f"{exc}") from None
    if result.status != OK or len(result.outputs) != 1 or \
            result.outputs[0].shape != canary.expected.shape or \
            not torch.allclose(result.outputs[0], canary.expected,
                               atol=1e-5, rtol=0):
        raise PreflightError(_explain(sandbox, result, ""),
                             f"{result.status}: {result.message}")
    return list(sandbox.layers)


def _explain(sandbox, result: ProbeResult | None, error: str) -> str:
    what = error or (f"{result.status}: {result.message}" if result
                     else "no result")
    detail = (result.stdout if result else "").strip()
    lines = ["the grader cannot grade on this machine: a known-correct "
             "canary submission failed in the sandbox, so no score is "
             "written (this is the grader's environment, not a "
             "submission).", f"  cause: {what}"]
    if detail:
        lines.append("  worker output: " + detail[-800:].replace(
            "\n", "\n    "))
    fallback = getattr(sandbox, "fallback", "")
    if fallback:
        lines.append(f"  before that: {fallback}; the cause above is "
                     f"the fallback's")
    lines.append("  remedy: " + _remedy(sandbox, f"{what}\n{detail}"))
    if fallback:
        lines.append("  or: make the namespaces work here, so that the "
                     "worker needs no access to the checkout's folders")
    return "\n".join(lines)


def _remedy(sandbox, text: str) -> str:
    missing = re.search(r"No module named '([\w.]+)'", text)
    if missing:
        return (f"install the package {missing.group(1)!r} in the grader's "
                f"Python ({sys.executable}); the shipped requirements pin "
                f"everything grading imports")
    user = getattr(sandbox, "user", None)
    if user is not None:
        uid, gid = user
        layers = getattr(sandbox, "layers", [])
        if "mount-namespace" not in layers:
            for path in [*getattr(sandbox, "readable", []),
                         os.path.realpath(sys.executable)]:
                blocked = jail.readable_by(uid, gid, path)
                if blocked:
                    return (f"the worker user {_user_name(uid)} cannot read "
                            f"{blocked}: run as a normal user, move the kit "
                            f"and its Python to a folder other users can "
                            f"read, or set AUTOGRADER_WORKER_USER to a user "
                            f"who can")
    if "lock up" in text:
        return ("the worker's jail could not be built here; set "
                "AUTOGRADER_NO_NAMESPACES=1 to grade with Landlock and the "
                "privilege drop only")
    return ("run `python -m autograder check` on the reference to see the "
            "worker's error; reinstall the grader's environment")


# --------------------------------------------------------------------------
# A passed canary, remembered per environment (``check`` only)
#
# ``check`` is a preview on the student's own machine, run again and again:
# there a canary that passed in the same environment is taken as passed.
# ``grade`` and ``gradescope`` never ask: a score is written only after a
# canary of the same run went through the real sandbox (and a Gradescope
# container is fresh for every submission, so it would never find one).
# The file lives in the user's own cache folder: a student who forges it
# skips a canary only for their own preview, never for a score.

CACHE_ENV = "AUTOGRADER_CACHE_DIR"
_CACHE_NAME = "canary.json"
_CACHE_ENTRIES = 8
_GRADER = Path(__file__).resolve().parents[1]   # the autograder package


def cache_dir() -> Path:
    """$AUTOGRADER_CACHE_DIR, else $XDG_CACHE_HOME/autograder, else
    ~/.cache/autograder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or \
        os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autograder"


def environment_key(sandbox) -> str:
    """What a canary's verdict depends on: the interpreter (path, mtime,
    version, import path), torch, the grader's own files, the user and
    the worker's user, the jail's settings and the kernel."""
    digest = hashlib.sha256()
    for path in sorted(_GRADER.rglob("*.py")):
        digest.update(str(path.relative_to(_GRADER)).encode() + b"\0")
        digest.update(path.read_bytes())
    python = os.path.realpath(sys.executable)
    try:
        mtime = os.stat(python).st_mtime_ns
    except OSError:
        mtime = 0
    facts = {"python": [python, mtime, sys.version, sys.path],
             "torch": torch.__version__, "grader": digest.hexdigest(),
             "euid": os.geteuid() if hasattr(os, "geteuid") else None,
             "worker": getattr(sandbox, "user", None),
             "plain": getattr(sandbox, "plain", False),
             "namespaces": getattr(sandbox, "namespaces", None),
             "landlock": getattr(sandbox, "landlock", None),
             "readable": getattr(sandbox, "readable", None),
             "kernel": os.uname().release if hasattr(os, "uname")
             else sys.platform}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str)
                          .encode()).hexdigest()


def remembered_preflight(sandbox, timeout: float = 60.0,
                         folder: Path | None = None) -> list[str]:
    """``run_preflight``, unless a canary already passed in this very
    environment (see ``environment_key``): then its jail layers, and the
    sandbox set up as that run left it. For ``check`` only."""
    path = (folder or cache_dir()) / _CACHE_NAME
    key = environment_key(sandbox)
    # Before any fallback turns the namespaces off (which changes the
    # key): forget_preflight drops this entry, not another.
    sandbox.canary_key = key
    entries = _read_cache(path)
    entry = entries.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("layers"), list) \
            and set(map(str, entry["layers"])) <= set(jail.LAYERS) \
            and isinstance(entry.get("namespaces"), bool):
        # The sandbox as the real run left it: namespaces (off after the
        # fallback), why (describe_jail), and the layers it reported.
        layers = [str(layer) for layer in entry["layers"]]
        sandbox.namespaces = entry["namespaces"]
        sandbox.layers = layers
        sandbox.fallback = str(entry.get("fallback", ""))[:1000]
        refused = entry.get("refused")
        sandbox.refused = [str(r)[:300] for r in refused[:10]] \
            if isinstance(refused, list) else []
        return layers
    layers = run_preflight(sandbox, timeout)
    entries.pop(key, None)
    entries[key] = {"layers": layers, "namespaces": bool(sandbox.namespaces),
                    "fallback": str(getattr(sandbox, "fallback", "")),
                    "refused": list(getattr(sandbox, "refused", []))}
    _write_cache(path, dict(list(entries.items())[-_CACHE_ENTRIES:]))
    return layers


def forget_preflight(sandbox, folder: Path | None = None) -> None:
    """Drop this environment's passed canary (a later ``check`` runs it
    again): for a run whose grading failed in the grader's own code."""
    path = (folder or cache_dir()) / _CACHE_NAME
    entries = _read_cache(path)
    key = getattr(sandbox, "canary_key", None) or environment_key(sandbox)
    if entries.pop(key, None) is not None:
        _write_cache(path, entries)


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, entries: dict) -> None:
    """Atomically, in a folder only this user can read; a cache that
    cannot be written is no error."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".canary-")
        with os.fdopen(fd, "w") as out:
            json.dump(entries, out)
        os.replace(tmp, path)
    except OSError:
        pass


def describe_jail(sandbox, layers: list[str]) -> str:
    """The lines every grading command prints: the jail's layers in use
    and, for each one missing, why (the failing call and its errno)."""
    lines = [f"jail: {', '.join(layers) or 'none'}"]
    missing = [x for x in ("mount-namespace", "pid-namespace", "landlock",
                           "seccomp") if x not in layers]
    if missing:
        why = list(getattr(sandbox, "refused", []))
        fallback = getattr(sandbox, "fallback", "")
        off = [r for r in why if r.startswith("namespaces: turned off")]
        why = [r for r in why if r not in off]
        if fallback:
            why.insert(0, fallback)
        elif off and os.environ.get("AUTOGRADER_NO_NAMESPACES"):
            why.insert(0, "namespaces: turned off by "
                          "AUTOGRADER_NO_NAMESPACES=1")
        elif off:
            why.insert(0, off[0])
        lines.append(f"warning: jail layers unavailable here: "
                     f"{', '.join(missing)} (see README, Isolation)")
        lines += [f"  because {reason}" for reason in why]
    return "\n".join(lines)


def _user_name(uid: int) -> str:
    try:
        import pwd   # Unix only: this module also serves check elsewhere
        return repr(pwd.getpwuid(uid).pw_name)
    except (ImportError, KeyError):
        return f"uid {uid}"


__all__ = ["CANARY_SOURCE", "Canary", "PreflightError", "cache_dir",
           "describe_jail", "environment_key", "forget_preflight",
           "make_canary", "prove_spare_uids", "remembered_preflight",
           "run_preflight"]
