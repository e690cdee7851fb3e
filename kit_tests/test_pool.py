"""What the worker may read (autograder/sandbox/pool.py's
``unreadable_home`` with jail.default_readable): from a checkout, nothing
of the checkout but a venv inside it; from an installed kit
(``pip install``: the grader in site-packages, torch beside it), all of
site-packages but the kit's own packages."""
from __future__ import annotations

from pathlib import Path

from autograder.sandbox import jail, pool


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name in ("autograder", "kit", "torch", "numpy"):
        (site / name).mkdir(parents=True)
    (site / "six.py").write_text("")
    return site


def test_an_installed_kit_hides_its_packages_not_torch(
        tmp_path, monkeypatch):
    site = _site(tmp_path)
    monkeypatch.setattr(jail, "python_paths", lambda: [str(site)])
    hidden = pool.unreadable_home(site)
    assert sorted(Path(p).name for p in hidden) == ["autograder", "kit"]
    readable = jail.default_readable(hidden)
    assert {str(site / n) for n in ("torch", "numpy", "six.py")} <= \
        set(readable)
    assert not [p for p in readable if p == str(site)
                or "/autograder" in p or p.endswith("/kit")]


def test_a_checkout_is_hidden_whole_but_its_own_venv(
        tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    site = _site(checkout)     # a venv inside the checkout
    monkeypatch.setattr(jail, "python_paths", lambda: [str(site)])
    assert pool.unreadable_home(checkout) == [str(checkout)]
    readable = jail.default_readable(pool.unreadable_home(checkout))
    assert str(site) in readable
    assert not [p for p in readable if p in (str(checkout),
                                             str(checkout / "venv"))]
