"""Why the fused form wins: time four attention implementations.

`make bench-attention` times one forward pass of
  1. MultiHeadAttentionWrapper  (a stack of causal heads, run one by one),
  2. MultiHeadAttention         (fused heads: one projection, view/transpose),
  3. the fused module with torch.nn.functional.scaled_dot_product_attention,
  4. torch.nn.MultiheadAttention (PyTorch's own module),
at GPT-2 size (batch 8, 1024 tokens, 768 dims, 12 heads; `--small` for a
quick run), on the CPU and on a GPU when there is one. It prints a table with
ratios to the fastest and writes a bar chart PNG that the notebook shows
(a `--small` run writes its chart under build/ instead).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from autograder import homework
from kit.generate.values import load_reference

ROOT = Path(__file__).resolve().parents[2]


def notebook_chart() -> Path:
    """The notebook's chart: beside the homework's notebook source, as
    its figures are."""
    return homework.staff().notebook_source.parent / "figures" / \
        "bench_attention.png"


# A quick run's chart: never the notebook's, whose sizes it would misstate
QUICK_CHART = ROOT / "build" / "bench_attention_small.png"
SIZES = {"gpt2": dict(batch=8, tokens=1024, dim=768, heads=12),
         "small": dict(batch=2, tokens=128, dim=96, heads=4)}


def sdpa_forward(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The fused module's forward with PyTorch's fused attention kernel."""
    b, n, _ = x.shape
    split = (b, n, module.num_heads, module.head_dim)
    q, k, v = (proj(x).view(split).transpose(1, 2)
               for proj in (module.W_query, module.W_key, module.W_value))
    context = F.scaled_dot_product_attention(
        q, k, v, is_causal=True,
        dropout_p=module.dropout.p if module.training else 0.0)
    return module.out_proj(context.transpose(1, 2).reshape(b, n, -1))


def implementations(reference, dim: int, heads: int, tokens: int,
                    device: str = "cpu"
                    ) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """name -> forward function, all in eval mode, no dropout, with their
    parameters on ``device``."""
    wrapper = reference.MultiHeadAttentionWrapper(
        dim, dim // heads, tokens, 0.0, heads, qkv_bias=True).eval()
    fused = reference.MultiHeadAttention(
        dim, dim, tokens, 0.0, heads, qkv_bias=True).eval()
    torch_mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
    torch_mha.eval()
    for module in (wrapper, fused, torch_mha):
        module.to(device)
    causal = torch.ones(tokens, tokens, dtype=torch.bool,
                        device=device).triu(1)
    return {
        "wrapper (stacked heads)": wrapper,
        "fused (view/transpose)": fused,
        "fused + scaled_dot_product_attention":
            lambda x: sdpa_forward(fused, x),
        "torch.nn.MultiheadAttention":
            lambda x: torch_mha(x, x, x, attn_mask=causal,
                                need_weights=False)[0],
    }


def time_forward(fn: Callable, x: torch.Tensor, repeats: int) -> float:
    """Median seconds of one forward pass, after one warm-up call."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    with torch.no_grad():
        fn(x)
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(size: str, repeats: int, devices: list[str]) -> list[tuple]:
    """Rows (device, name, seconds) for every implementation and device."""
    cfg = SIZES[size]
    reference = load_reference()
    rows = []
    for device in devices:
        torch.manual_seed(0)
        impls = implementations(reference, cfg["dim"], cfg["heads"],
                                cfg["tokens"], device)
        x = torch.randn(cfg["batch"], cfg["tokens"], cfg["dim"],
                        device=device)
        for name, fn in impls.items():
            seconds = time_forward(fn, x, repeats)
            rows.append((device, name, seconds))
            print(f"  {device:4} {name:38} {seconds * 1000:9.1f} ms",
                  file=sys.stderr)
    return rows


def table(rows: list[tuple]) -> str:
    """Markdown table with each row's ratio to the fastest on its device."""
    lines = ["| device | implementation | ms / forward | x fastest |",
             "|---|---|---:|---:|"]
    for device in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == device]
        best = min(r[2] for r in mine)
        for _, name, seconds in mine:
            lines.append(f"| {device} | {name} | {seconds * 1000:.1f} | "
                         f"{seconds / best:.2f} |")
    return "\n".join(lines)


def chart(rows: list[tuple], path: Path, title: str) -> None:
    """Horizontal bar chart of milliseconds per forward pass."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{name} ({device})" for device, name, _ in rows]
    ms = [seconds * 1000 for _, _, seconds in rows]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.2))
    bars = ax.barh(labels[::-1], ms[::-1], color="#4c72b0")
    ax.bar_label(bars, [f"{v:,.0f} ms" for v in ms[::-1]], padding=3)
    ax.set_xlim(0, max(ms) * 1.18)
    ax.set_xlabel("milliseconds per forward pass (lower is better)")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _shown(path: Path) -> str:
    """``path`` relative to the checkout where it is inside it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT)
               else path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kit.machine.bench_attention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true",
                        help="a small size for a quick run")
    parser.add_argument("--repeats", type=int, default=3)
    notebooks = notebook_chart()
    parser.add_argument("--chart", type=Path, default=None,
                        help=f"PNG to write (default: {_shown(notebooks)}; "
                             f"with --small {_shown(QUICK_CHART)})")
    args = parser.parse_args(argv)
    size = "small" if args.small else "gpt2"
    path = args.chart or (QUICK_CHART if args.small else notebooks)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    cfg = SIZES[size]
    title = (f"batch {cfg['batch']}, {cfg['tokens']} tokens, {cfg['dim']} "
             f"dims, {cfg['heads']} heads, {torch.get_num_threads()} CPU "
             f"threads")
    print(f"Timing attention forward passes: {title}", file=sys.stderr)
    rows = run(size, args.repeats, devices)
    print(table(rows))
    chart(rows, path, title)
    print(f"\nchart written to {path}; " + (
        "`make build-notebook` embeds it in the notebook" if path == notebooks
        else f"the notebook's chart ({_shown(notebooks)}) is unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
