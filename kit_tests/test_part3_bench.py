"""kit.machine.bench_attention on tiny sizes: the four forms agree where they
should, the table and the chart are well formed. No timing assertions."""
from __future__ import annotations

import pytest
import torch

from kit.machine import bench_attention
from kit.generate.values import load_reference


@pytest.fixture(scope="module")
def impls():
    torch.manual_seed(0)
    return bench_attention.implementations(load_reference(), dim=12,
                                           heads=3, tokens=5)


def test_every_implementation_maps_a_batch_to_its_shape(impls):
    x = torch.randn(2, 5, 12)
    assert len(impls) == 4
    with torch.no_grad():
        for name, fn in impls.items():
            assert fn(x).shape == (2, 5, 12), name


def test_sdpa_forward_equals_the_fused_module(impls):
    fused = impls["fused (view/transpose)"]
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        torch.testing.assert_close(bench_attention.sdpa_forward(fused, x),
                                   fused(x), atol=1e-5, rtol=0)


def test_torch_module_is_causal(impls):
    mha = impls["torch.nn.MultiheadAttention"]
    x = torch.randn(1, 5, 12)
    changed = x.clone()
    changed[:, -1] += 1
    with torch.no_grad():
        torch.testing.assert_close(mha(changed)[:, :-1], mha(x)[:, :-1])


def test_run_table_and_chart_on_a_tiny_size(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(bench_attention.SIZES, "tiny",
                        dict(batch=1, tokens=4, dim=8, heads=2))
    rows = bench_attention.run("tiny", repeats=1, devices=["cpu"])
    assert [r[:2] for r in rows] == [
        ("cpu", "wrapper (stacked heads)"), ("cpu", "fused (view/transpose)"),
        ("cpu", "fused + scaled_dot_product_attention"),
        ("cpu", "torch.nn.MultiheadAttention")]
    assert all(seconds > 0 for _, _, seconds in rows)
    lines = bench_attention.table(rows).splitlines()
    assert lines[0] == "| device | implementation | ms / forward | x fastest |"
    assert len(lines) == 2 + len(rows)
    assert any(line.endswith("| 1.00 |") for line in lines[2:])
    path = tmp_path / "figures" / "chart.png"
    bench_attention.chart(rows, path, "tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_ratios_per_device():
    rows = [("cpu", "a", 2.0), ("cpu", "b", 1.0), ("cuda", "a", 0.5),
            ("cuda", "b", 0.25)]
    text = bench_attention.table(rows)
    assert "| cpu | a | 2000.0 | 2.00 |" in text
    assert "| cuda | b | 250.0 | 1.00 |" in text


def test_main_writes_table_and_chart(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(bench_attention.SIZES, "small",
                        dict(batch=1, tokens=4, dim=8, heads=2))
    chart = tmp_path / "bench.png"
    assert bench_attention.main(["--small", "--repeats", "1", "--chart",
                                 str(chart)]) == 0
    out = capsys.readouterr().out
    assert "| cpu | fused (view/transpose) |" in out
    assert chart.exists()


def test_a_quick_run_leaves_the_notebooks_chart(monkeypatch, tmp_path,
                                                capsys):
    monkeypatch.setitem(bench_attention.SIZES, "small",
                        dict(batch=1, tokens=4, dim=8, heads=2))
    quick = tmp_path / "build" / "quick.png"
    monkeypatch.setattr(bench_attention, "QUICK_CHART", quick)
    notebooks = tmp_path / "figures" / "chart.png"
    monkeypatch.setattr(bench_attention, "notebook_chart",
                        lambda: notebooks)
    assert bench_attention.main(["--small", "--repeats", "1"]) == 0
    assert quick.exists() and not notebooks.exists()
    assert f"the notebook's chart ({notebooks}) is unchanged" in \
        capsys.readouterr().out
