"""Open a file whose path a user named, never blocking on what it is.

A path handed to the grader (a submission, a folder of them, a graded
folder, an export, a notebook found in one) may name a FIFO, a device or
a socket: ``open()`` on a FIFO blocks until a writer comes, so one such
name could hang a whole batch. Every read of a user-named path
goes through :func:`open_regular` or :func:`read_regular`: the path is
``lstat``-ed first (nothing but a regular file is opened at all), opened
with ``O_NONBLOCK`` and ``O_NOFOLLOW`` (a swap for a FIFO or a link
between the two cannot block or redirect it), and the open file must be
the regular file that was seen (``fstat``: same device and inode).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
          | getattr(os, "O_BINARY", 0))


class NotRegularFile(OSError):
    """The path names something other than a regular file (a FIFO, a
    device, a socket, a folder, a symbolic link). Its errno is EINVAL, not
    one of the grader machine's faults: what was handed in is at fault."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})",
                         os.fspath(path))
        self.kind = kind


def kind_of(mode: int) -> str:
    """A file mode's type in words (for messages)."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a link"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def open_regular(path: str | os.PathLike[str], *,
                 follow_links: bool = False) -> BinaryIO:
    """``path`` opened for binary reading, only if it is a regular file
    (not a link to one, unless ``follow_links``: a file staff or the
    student name for their own use, such as a rubric kept in a course's
    repository and linked, whose target must then be a regular file).
    Raises NotRegularFile for anything else, OSError when it cannot be
    opened; never blocks on what the path names."""
    seen = os.stat(path) if follow_links else os.lstat(path)
    if not stat.S_ISREG(seen.st_mode):
        raise NotRegularFile(path, kind_of(seen.st_mode))
    flags = _FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow_links \
        else _FLAGS
    fd = os.open(path, flags)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or \
                (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise NotRegularFile(path, kind_of(opened.st_mode))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str],
                 limit: int | None = None, *,
                 follow_links: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`);
    with ``limit``, ValueError when it holds more than ``limit`` bytes
    (nothing beyond ``limit + 1`` is read)."""
    with open_regular(path, follow_links=follow_links) as handle:
        if limit is None:
            return handle.read()
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{Path(path).name}: larger than {limit} bytes")
    return data


def read_regular_text(path: str | os.PathLike[str], *,
                      encoding: str = "utf-8", errors: str = "strict",
                      limit: int | None = None,
                      follow_links: bool = False) -> str:
    """The text of the regular file ``path`` (see :func:`read_regular`),
    newlines translated as ``Path.read_text`` does."""
    text = read_regular(path, limit, follow_links=follow_links).decode(
        encoding, errors)
    return text.replace("\r\n", "\n").replace("\r", "\n")


__all__ = ["NotRegularFile", "kind_of", "open_regular", "read_regular",
           "read_regular_text"]
