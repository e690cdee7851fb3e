from gen import fill
IMPORTS = '''from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor


@dataclass(frozen=True)
class Heads:
    """How a projection of [batch, seq, heads * size] splits into heads."""

    batch: int
    seq: int
    heads: int
    size: int

    def split(self, t: Tensor) -> Tensor:
        t = t.view(self.batch, self.seq, self.heads, self.size)
        # [batch, seq, heads, head_size]
        return t.transpose(1, 2)  # [batch, heads, seq, head_size]

    def merge(self, t: Tensor) -> Tensor:
        t = t.transpose(1, 2)  # [batch, seq, heads, head_size]
        return t.reshape(self.batch, self.seq, self.heads * self.size)
        # [batch, seq, hidden]


def scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """q k^T / sqrt(d) over the last two dimensions."""
    d = q.size(-1)
    return q @ k.transpose(-2, -1) / math.sqrt(d)  # [..., seq, seq]


def future_mask(n: int, device: torch.device) -> Tensor:
    """True where key j lies after query i."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    # [seq, seq]
'''
B = [None,
'''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = scaled_scores(q, k).softmax(dim=-1)  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
''',
'''        heads = Heads(bs, seq, self.num_heads, self.head_size)
        q: Tensor = heads.split(self.q(x))  # [bs, heads, seq, head_size]
        k: Tensor = heads.split(self.k(x))  # [bs, heads, seq, head_size]
        v: Tensor = heads.split(self.v(x))  # [bs, heads, seq, head_size]
        scores = scaled_scores(q, k)  # [bs, heads, seq, seq]
''',
'''            hide = future_mask(seq, x.device)  # [seq, seq]
            scores = scores.masked_fill(hide, float("-inf"))
            # [bs, heads, seq, seq]
''',
'''        probs = self.dropout(scores.softmax(dim=-1))  # [bs, heads, seq, seq]
        att = self.mix(heads.merge(probs @ v))  # [bs, seq, hidden]
        probs = probs.reshape(-1, seq, seq)  # [bs * heads, seq, seq]
''',
'''        queries: Tensor = self.W_query(x)  # [b, num_tokens, d_out]
        keys: Tensor = self.W_key(x)  # [b, num_tokens, d_out]
        values: Tensor = self.W_value(x)  # [b, num_tokens, d_out]
        hide = self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        scores = scaled_scores(queries, keys).masked_fill(hide, -math.inf)
        # [b, num_tokens, num_tokens]
        weights = self.dropout(scores.softmax(dim=-1))
        # [b, num_tokens, num_tokens]
        return weights @ values  # [b, num_tokens, d_out]
''',
'''        outputs: list[Tensor] = [head(x) for head in self.heads]
        return torch.cat(outputs, dim=-1)  # [b, num_tokens, num_heads * d_out]
''',
'''        heads = Heads(b, num_tokens, self.num_heads, self.head_dim)
        queries = heads.split(self.W_query(x))
        # [b, num_heads, num_tokens, head_dim]
        keys = heads.split(self.W_key(x))
        # [b, num_heads, num_tokens, head_dim]
        values = heads.split(self.W_value(x))
        # [b, num_heads, num_tokens, head_dim]
        hide = self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        scores = scaled_scores(queries, keys).masked_fill(hide, -math.inf)
        # [b, num_heads, num_tokens, num_tokens]
        weights = self.dropout(scores.softmax(dim=-1))
        # [b, num_heads, num_tokens, num_tokens]
        return self.out_proj(heads.merge(weights @ values))
        # [b, num_tokens, d_out]
''',
None]
TEXT = fill(IMPORTS, B)
