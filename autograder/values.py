"""Load the frozen test cases (public and, where present, hidden).

Files are checked against the sha256 in the manifest before use, and loaded
with safetensors, which never executes code.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from autograder import homework
from autograder.files.user_files import read_regular


class ValuesError(RuntimeError):
    """The test values are missing, corrupt or inconsistent."""


@dataclass(frozen=True)
class Scale:
    """The size each head's scores are divided by the root of, and its
    name as the class's docstring says it (``head_dim``): frozen per case
    by the homework's steps definition, for the diagnosis's words."""

    name: str
    size: int


@dataclass
class Case:
    """One frozen case as the grader sees it."""

    name: str
    set: str
    task: str
    cls: str
    init: dict[str, Any]
    mode: str
    seed: int
    description: str
    tensors: dict[str, torch.Tensor] = field(repr=False)
    # How the weights were made (kit/generate/cases.py): "init" (seeded), or
    # for Part 3 "dropout_probe" / "concat" (a wrapper's heads fused).
    recipe: str = "init"
    # Mistake id -> the error its code raises on this case (the catalogue's
    # mistakes that raise instead of returning an output).
    mistake_errors: dict[str, str] = field(default_factory=dict)
    # forward's keyword arguments when the values were frozen (e.g.
    # ``{"return_attention": True}``), and the scale of the scores (None:
    # a class whose steps are not frozen).
    call: dict[str, Any] = field(default_factory=dict)
    scale: Scale | None = None
    # Step -> the attribute of the layer computing it (``{"q": "W_query"}``):
    # the diagnosis names a layer whose bias is left out.
    layers: dict[str, str] = field(default_factory=dict)
    # Role -> the constructor argument holding it, declared by the
    # homework's cases (``{"heads": "num_heads"}``): "input" (x's last
    # size), "width" (the output's, or a stacked head's, size), "heads",
    # "context" (the longest input). The grader reads a size by its role,
    # never by the homework's name for it.
    arguments: dict[str, str] = field(default_factory=dict)

    def argument(self, role: str) -> str | None:
        """The constructor argument that holds ``role`` (None: none)."""
        return self.arguments.get(role)

    def size(self, role: str, default: Any = None) -> Any:
        """The value of the argument holding ``role`` (``default``: the
        class has none, or the case does not set it)."""
        name = self.arguments.get(role)
        return self.init.get(name, default) if name else default

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """State-dict-path -> tensor, e.g. ``{"q.weight": ...}``, or the
        module's own ``{"weight": ...}`` (a parameter set on the module
        itself has no dot in its path)."""
        return {k: v for k, v in self.tensors.items()
                if k.rsplit(".", 1)[-1] in ("weight", "bias")
                and not k.startswith("mistake.")}

    @property
    def mistakes(self) -> dict[str, dict[str, torch.Tensor]]:
        """Mistake id -> {"output": ..., "attention": ...} on this case."""
        found: dict[str, dict[str, torch.Tensor]] = {}
        for key, value in self.tensors.items():
            if key.startswith("mistake."):
                _, mid, what = key.split(".", 2)
                found.setdefault(mid, {})[what] = value
        return found

    @property
    def sizes(self) -> dict[str, int]:
        """Dimension sizes: batch_size, seq_len, and the init sizes."""
        batch, seq, _ = self.tensors["x"].shape
        sizes = {"batch_size": batch, "seq_len": seq, **{
            k: v for k, v in self.init.items() if isinstance(v, int)
            and not isinstance(v, bool)}}
        if self.scale is not None:
            sizes.setdefault(self.scale.name, self.scale.size)
        return sizes


def _scale(record: dict[str, Any], name: str) -> Scale | None:
    """The case's frozen scale, if any; ValuesError if malformed."""
    found = record.get("scale")
    if found is None:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("name"), str) \
            or type(found.get("size")) is not int or found["size"] < 1:
        raise ValuesError(f"case {name}: its `scale` in manifest.json is "
                          f"not {{\"name\": str, \"size\": int >= 1}}: "
                          f"regenerate with `make test-values`")
    return Scale(found["name"], found["size"])


def _layers(record: dict[str, Any], name: str,
            key: str = "layers") -> dict[str, str]:
    """The case's frozen step -> layer names (``key`` "arguments": role ->
    argument names); ValuesError if malformed."""
    found = record.get(key, {})
    if not isinstance(found, dict) or not all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in found.items()):
        raise ValuesError(f"case {name}: its `{key}` in manifest.json is "
                          f"not a table of names: "
                          f"regenerate with `make test-values`")
    return dict(found)


def values_dir(hw: homework.Homework | None = None) -> Path:
    """Where the values live: ``$AUTOGRADER_VALUES`` or the test values of
    ``hw`` (default: the homework in use)."""
    found = os.environ.get("AUTOGRADER_VALUES")
    return Path(found) if found else (hw or homework.current()).test_values


def load_cases(directory: Path | None = None,
               sets: tuple[str, ...] = ("public", "hidden")) -> list[Case]:
    """Every case of the requested sets whose file is present, in manifest
    order. A missing hidden file is normal (the student release); a missing
    public file or a checksum mismatch raises ValuesError."""
    directory = Path(directory or values_dir())
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(read_regular(manifest_path, follow_links=True))
    except (OSError, ValueError) as exc:
        raise ValuesError(f"cannot read {manifest_path}: {exc}") from exc
    cases = []
    for set_name in sets:
        filename = f"{set_name}.safetensors"
        info = manifest["files"].get(filename)
        if info is None:
            continue
        path = directory / filename
        if not path.exists():
            if set_name == "public":
                raise ValuesError(f"missing {path}")
            continue
        try:   # --values names it: only a regular file is opened
            data = read_regular(path, follow_links=True)
        except OSError as exc:
            raise ValuesError(f"cannot read {path}: {exc}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != info["sha256"]:
            raise ValuesError(f"{path} does not match its sha256 in "
                              f"manifest.json: regenerate with "
                              f"`make test-values`")
        # From the file, known regular now: tensors made from the bytes
        # instead moved two catalogue entries' feedback (kit.corpus.
        # verdicts --compare), a cause not yet traced.
        tensors = load_file(str(path))
        for name in info["cases"]:
            record = manifest["cases"][name]
            prefix = f"{name}/"
            cases.append(Case(
                name=name, set=record["set"], task=record["task"],
                cls=record["class"], init=record["init"],
                mode=record["mode"], seed=record["seed"],
                description=record["description"],
                recipe=record.get("weights", "init").split(":")[0],
                mistake_errors=record.get("mistake_errors", {}),
                call=record.get("call", {}), scale=_scale(record, name),
                layers=_layers(record, name),
                arguments=_layers(record, name, "arguments"),
                tensors={k[len(prefix):]: v for k, v in tensors.items()
                         if k.startswith(prefix)}))
    return cases
