"""A grading config that cannot be read is a usage error naming the file
and the remedy (exit 2), never a traceback or a score."""
from __future__ import annotations

import functools

import pytest

from autograder import batch
from autograder.config import MistakesError, load_config, \
    load_mistake_messages


@pytest.mark.parametrize("text", ["[no_scale\n", None, b"\xff\xfe"])
def test_an_unreadable_mistakes_file_names_itself(tmp_path, text):
    path = tmp_path / "mistakes.toml"
    if isinstance(text, str):
        path.write_text(text)
    elif text is not None:
        path.write_bytes(text)
    with pytest.raises(MistakesError, match="make generate") as caught:
        load_mistake_messages(path)
    assert str(path) in str(caught.value)


def test_a_command_stops_with_a_usage_error(tmp_path, monkeypatch):
    broken = tmp_path / "mistakes.toml"
    broken.write_text("message = \n")
    monkeypatch.setattr(batch, "load_config",
                        functools.partial(load_config, mistakes=broken))
    with pytest.raises(batch.ConfigError, match=str(broken)):
        batch.read_config(None, None, ("public",))
