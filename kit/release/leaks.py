"""Scan a release for anything students must not see.

What counts as a leak (each reported as ``path:line: kind: detail``):

- a non-trivial line of a solution region of the reference
  (``kit.generate.skeleton.solution_lines``), compared without whitespace and
  comments, in any text file, notebook cell or zip member;
- a staff sample answer of the master notebook (cells marked
  ``{"kit": {"sample": true}}``);
- a hidden case's name, the hidden file's sha256, or the hidden file itself;
- hidden tensor data: raw float32 bytes (4 consecutive values) in binary
  files, or 3 consecutive hidden values printed with 3+ decimals in text;
- files that never ship: ``solutions/``, ``kit/`` (with ``kit/variants/``,
  the catalogue of edits of the reference), ``kit_tests/``,
  ``hidden.safetensors``, otter's master-notebook markers.

``python -m kit.release.leaks DIR_OR_ZIP`` scans from the command line.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from autograder import homework

ROOT = Path(__file__).resolve().parents[2]

MIN_NEEDLE = 12        # shorter normalised lines are too generic to match on
MIN_SAMPLE_LINE = 40   # sample-answer lines shorter than this are generic
WINDOW = 3             # consecutive printed values that identify a tensor
_FLOAT = re.compile(r"(?<![\w.])[-+]?(\d+)\.(\d+)(?:[eE]([-+]?\d+))?")
# "kit" covers kit/variants/: the reference's lines, as edits of it.
# The reference's top folder (solutions/) never ships either (Secrets).
_FORBIDDEN_PARTS = frozenset({"kit", "kit_tests"})
_FORBIDDEN_NAMES = {"hidden.safetensors"}
_MASTER_MARKERS = ("# BEGIN SOLUTION", "# ASSIGNMENT CONFIG",
                   "# BEGIN QUESTION")


@dataclass(frozen=True)
class Leak:
    """One finding. ``line`` is 1-based; 0 when it concerns a whole file."""

    path: str
    line: int
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.detail}"


def _normalise(code: str) -> str:
    """Code without its comment and without any whitespace."""
    code = re.sub(r"\s+#.*$", "", code)
    return re.sub(r"\s+", "", code)


@dataclass
class Secrets:
    """Everything the scanner looks for, prepared once."""

    needles: dict[str, tuple[str, str]]  # normalised text -> (kind, shown)
    case_names: list[str]
    sha256s: set[str]
    byte_chunks: list[tuple[str, bytes]]  # (tensor key, 16 raw bytes)
    windows: dict[int, np.ndarray]       # decimals -> sorted window keys
    # Folders no release holds (the reference's top folder among them).
    forbidden_parts: frozenset[str] = _FORBIDDEN_PARTS

    @classmethod
    def load(cls, hw: homework.Homework | None = None) -> "Secrets":
        """Secrets from the homework ``hw``'s reference, hidden values and
        master notebook (default: the homework in use)."""
        from kit.generate.skeleton import solution_lines
        hw = hw or homework.staff()
        reference, values = hw.reference, hw.test_values
        master_notebook = hw.notebook
        ref = reference.read_text()
        needles: dict[str, tuple[str, str]] = {}
        given = _given_code(ref)
        for lineno, text in solution_lines(ref):
            key = _normalise(text)
            # A line that also appears in given (shipped) code is no leak;
            # nor is the opening of a call split over lines
            # ("probs = torch.softmax("): it names a function, not a step.
            if len(key) < MIN_NEEDLE or key.endswith(("(", "[", "{")) \
                    or any(key in g for g in given):
                continue
            needles[key] = ("solution line",
                            f"reference line {lineno}: {text.strip()}")
        if master_notebook is not None and master_notebook.exists():
            for text in _sample_answer_lines(master_notebook):
                needles.setdefault(_normalise(text), (
                    "sample answer", text.strip()[:60]))
        manifest = json.loads((values / "manifest.json").read_text())
        hidden_info = manifest["files"].get("hidden.safetensors", {})
        hidden_path = values / "hidden.safetensors"
        tensors = load_file(str(hidden_path))
        public = load_file(str(values / "public.safetensors"))
        shas = {hidden_info.get("sha256", ""),
                hashlib.sha256(hidden_path.read_bytes()).hexdigest()} - {""}
        return cls(needles=needles,
                   case_names=sorted(hidden_info.get("cases", [])),
                   sha256s=shas,
                   byte_chunks=_byte_chunks(tensors, public),
                   windows={d: np.setdiff1d(_window_keys(tensors, d),
                                            _window_keys(public, d))
                            for d in (3, 4)},
                   forbidden_parts=_FORBIDDEN_PARTS | {
                       reference.relative_to(hw.root).parts[0]})


def _given_code(source: str) -> list[str]:
    """Normalised lines of the reference outside the student regions."""
    from autograder.submission.regions import find_regions
    inside = {n for r in find_regions(source)
              for n in range(r.start, r.end + 1)}
    return [_normalise(line) for n, line in
            enumerate(source.splitlines(), 1) if n not in inside]


def _sample_answer_lines(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    lines = []
    for cell in nb.get("cells", []):
        if cell.get("metadata", {}).get("kit", {}).get("sample"):
            source = cell["source"]
            text = "".join(source) if isinstance(source, list) else source
            lines += [ln for ln in text.splitlines()
                      if len(ln.strip()) >= MIN_SAMPLE_LINE]
    return lines


def _trivial(values: np.ndarray) -> bool:
    """Non-finite or all round (0, 1, 0.5 ...): could be anything, so no
    evidence of a leak."""
    if not np.all(np.isfinite(values)):
        return True
    return bool(np.all(np.abs(values * 100 - np.round(values * 100)) < 1e-6))


def _byte_chunks(tensors: dict[str, np.ndarray],
                 public: dict[str, np.ndarray]) -> list[tuple[str, bytes]]:
    """Up to two 4-value float32 chunks of non-round values per tensor,
    leaving out chunks that also occur in the public values."""
    public_bytes = b"".join(np.ascontiguousarray(a).tobytes()
                            for a in public.values())
    chunks = []
    for key, array in tensors.items():
        flat = np.ascontiguousarray(array, dtype=np.float32).ravel()
        found = 0
        for start in range(0, max(len(flat) - 3, 0), 4):
            window = flat[start:start + 4]
            if len(window) == 4 and not _trivial(window) \
                    and window.tobytes() not in public_bytes:
                chunks.append((key, window.tobytes()))
                found += 1
                if found == 2:
                    break
    return chunks


_MUL = np.array([1_000_003 ** 2, 1_000_003, 1], dtype=np.uint64)


def _keys(rounded: np.ndarray) -> np.ndarray:
    """A hash per window of WINDOW consecutive rounded ints."""
    if len(rounded) < WINDOW:
        return np.empty(0, dtype=np.uint64)
    view = np.lib.stride_tricks.sliding_window_view(
        rounded.astype(np.int64).view(np.uint64), WINDOW)
    with np.errstate(over="ignore"):
        return (view * _MUL).sum(axis=1, dtype=np.uint64)


def _window_keys(tensors: dict[str, np.ndarray], decimals: int
                 ) -> np.ndarray:
    keys = []
    for array in tensors.values():
        flat = np.asarray(array, dtype=np.float64).ravel()
        flat = flat[np.isfinite(flat)]
        rounded = np.round(flat * 10 ** decimals)
        k = _keys(rounded)
        if len(k):
            # drop windows that are all round numbers (zeros of a mask, 1.0)
            coarse = np.abs(rounded / 10 ** (decimals - 2)
                            - np.round(rounded / 10 ** (decimals - 2))) < 1e-9
            round_win = np.lib.stride_tricks.sliding_window_view(
                coarse, WINDOW).all(axis=1)
            keys.append(k[~round_win])
    return np.unique(np.concatenate(keys)) if keys else np.empty(0, np.uint64)


# -- scanning ---------------------------------------------------------------

def scan_text(path: str, text: str, secrets: Secrets,
              line_offset: int = 0, where: str = "") -> list[Leak]:
    """Leaks in one text (a file or a notebook cell)."""
    leaks = []
    lines = text.splitlines()
    names = re.compile(r"\b(" + "|".join(map(re.escape, secrets.case_names))
                       + r")\b") if secrets.case_names else None
    for n, line in enumerate(lines, 1):
        lineno = n + line_offset
        prefix = f"{where}: " if where else ""
        flat = _normalise_line(line)
        for key, (kind, shown) in secrets.needles.items():
            if key in flat:
                leaks.append(Leak(path, lineno, kind, prefix + shown))
        if names is not None:
            for match in names.finditer(line):
                leaks.append(Leak(path, lineno, "hidden case name",
                                  prefix + match.group(1)))
        low = line.lower()
        for sha in secrets.sha256s:
            if sha in low:
                leaks.append(Leak(path, lineno, "hidden file sha256",
                                  prefix + sha[:16] + "..."))
        for marker in _MASTER_MARKERS:
            if line.strip().startswith(marker):
                leaks.append(Leak(path, lineno, "master notebook marker",
                                  prefix + marker))
    leaks += _scan_floats(path, lines, secrets, line_offset, where)
    return leaks


def _normalise_line(line: str) -> str:
    # Unlike needles, keep comments: a solution pasted into a comment or a
    # docstring is still a leak.
    return re.sub(r"\s+", "", line)


def _scan_floats(path: str, lines: list[str], secrets: Secrets,
                 line_offset: int, where: str) -> list[Leak]:
    """Three consecutive float literals equal to consecutive hidden
    values, at the precision they are printed with."""
    found: list[tuple[int, float, int]] = []  # (line, value, decimals)
    for n, line in enumerate(lines, 1):
        for m in _FLOAT.finditer(line):
            decimals = len(m.group(2)) - int(m.group(3) or 0)
            found.append((n, float(m.group(0)), decimals))
    leaks = []
    for decimals, table in secrets.windows.items():
        if not len(table):
            continue
        # values printed with fewer decimals carry too little evidence; with
        # more, compare at 4 (they round to the same 4-decimal value)
        usable = [(n, v) for n, v, d in found
                  if (d == decimals if decimals < 4 else d >= decimals)]
        if len(usable) < WINDOW:
            continue
        rounded = np.round(np.array([v for _, v in usable]) * 10 ** decimals)
        hits = np.isin(_keys(rounded), table)
        reported: set[int] = set()
        for i in np.flatnonzero(hits):
            window = [v for _, v in usable[i:i + WINDOW]]
            n = usable[i][0] + line_offset
            if _trivial(np.array(window)) or n in reported:
                continue
            reported.add(n)  # one finding per line is enough to act on
            leaks.append(Leak(path, n, "hidden values",
                              (f"{where}: " if where else "")
                              + ", ".join(f"{v:g}" for v in window)))
    return leaks


def scan_bytes(path: str, data: bytes, secrets: Secrets) -> list[Leak]:
    """Leaks in one file's bytes: text, notebook, zip or binary."""
    name = path.rsplit("/", 1)[-1]
    leaks = []
    parts = set(path.split("/")[:-1])
    if name in _FORBIDDEN_NAMES or parts & secrets.forbidden_parts:
        leaks.append(Leak(path, 0, "forbidden file",
                          "staff-only path in the release"))
    if hashlib.sha256(data).hexdigest() in secrets.sha256s:
        leaks.append(Leak(path, 0, "hidden file",
                          "identical to hidden.safetensors"))
    if zipfile.is_zipfile(io.BytesIO(data)) and name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    leaks += scan_bytes(f"{path}!{info.filename}",
                                        archive.read(info), secrets)
        return leaks
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and name.endswith(".ipynb"):
        leaks += _scan_notebook(path, text, secrets)
    elif text is not None and "\0" not in text:
        leaks += scan_text(path, text, secrets)
    else:
        hits = [(key, data.find(chunk)) for key, chunk in secrets.byte_chunks]
        hits = [(key, offset) for key, offset in hits if offset >= 0]
        if hits:  # one finding per file: the first tensor found, and a count
            tensors = len({key for key, _ in hits})
            leaks.append(Leak(path, 0, "hidden values",
                              f"raw bytes of {hits[0][0]} at offset "
                              f"{hits[0][1]} ({tensors} hidden tensors)"))
        low = data.lower()
        for sha in secrets.sha256s:
            if sha.encode() in low:
                leaks.append(Leak(path, 0, "hidden file sha256",
                                  sha[:16] + "..."))
        for case in secrets.case_names:
            if re.search(rb"(?<![\w])" + re.escape(case.encode())
                         + rb"(?![\w])", data):
                leaks.append(Leak(path, 0, "hidden case name", case))
    return leaks


def _scan_notebook(path: str, text: str, secrets: Secrets) -> list[Leak]:
    """Scan each cell's source and outputs; lines are per cell."""
    try:
        nb = json.loads(text)
    except ValueError:
        return scan_text(path, text, secrets)
    leaks = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("metadata", {}).get("kit", {}).get("sample"):
            leaks.append(Leak(path, 0, "sample answer",
                              f"cell {index} is a staff sample answer"))
        texts = [cell.get("source", "")]
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts += list(output.get("data", {}).values())
        for part in texts:
            if isinstance(part, list):
                part = "".join(map(str, part))
            if isinstance(part, str):
                leaks += scan_text(path, part, secrets, where=f"cell {index}")
    # metadata and anything else: the raw text, deduplicated by message
    seen = {(leak.kind, leak.detail.split(": ", 1)[-1]) for leak in leaks}
    for leak in scan_text(path, json.dumps(nb.get("metadata", {})), secrets):
        if (leak.kind, leak.detail) not in seen:
            leaks.append(leak)
    return leaks


def scan_tree(root: Path, secrets: Secrets | None = None) -> list[Leak]:
    """Every leak in every file under ``root`` (or in the zip ``root``)."""
    secrets = secrets or Secrets.load()
    root = Path(root)
    if root.is_file():
        return scan_bytes(root.name, root.read_bytes(), secrets)
    leaks = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        leaks += scan_bytes(rel, path.read_bytes(), secrets)
    return leaks


def main(argv: list[str] | None = None) -> int:
    """Scan the given directories or zips; exit 1 if anything leaks."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.release.leaks",
        description="scan a release for leaks")
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    secrets = Secrets.load()
    leaks = [leak for p in args.paths for leak in scan_tree(p, secrets)]
    for leak in leaks:
        print(leak)
    print(f"{len(leaks)} leak(s) found" if leaks else "no leaks found")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
