"""The homework's names, read from ``homework.toml`` (its profile).

Beside this file in the release; the kit's own copy (kit/student/) reads
the repository's. Plain Python 3 (no tomllib: the commands run on any
Python far enough to say why they refuse): the profile's simple
``key = "value"`` lines, by section.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "homework.toml"
_SECTION = re.compile(r'^\[([A-Za-z_]+)\]\s*(#.*)?$')
_VALUE = re.compile(r'^([A-Za-z_]+)\s*=\s*"([^"\\]*)"\s*(#.*)?$')


def profile_path():
    """The profile: beside this file, else the repository's (two up)."""
    for folder in (HERE, os.path.dirname(os.path.dirname(HERE))):
        path = os.path.join(folder, NAME)
        if os.path.isfile(path):
            return path
    return os.path.join(HERE, NAME)


def value(section, key):
    """The string ``key`` of ``[section]``; SystemExit naming the file if
    it is missing or lacks it (the release is incomplete)."""
    path = profile_path()
    current = None
    try:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                line = line.strip()
                heading = _SECTION.match(line)
                if heading:
                    current = heading.group(1)
                    continue
                found = _VALUE.match(line)
                if found and current == section and found.group(1) == key:
                    return found.group(2)
    except OSError as exc:
        raise SystemExit(f"cannot read {path} ({exc}): unzip the homework "
                         f"again and run this in its folder")
    raise SystemExit(f"{path} has no [{section}] {key}: unzip the homework "
                     f"again and run this in its folder")
