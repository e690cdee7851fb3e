"""Build eval5/submissions/*.py: eight honest styles filled into the
student skeleton, and the bugged submissions as edits of those styles.

Written for the issue-32 evaluation; independent of every corpus of the
kit. Each file is a complete `modeling_attention.py` as a student hands it
in. The intended bug of each file lives in eval5/key.toml, not here
(the edits below are only how the files were written).

    python3 eval/eval5/build.py [SKELETON]   # default: transformer_lm/... of
                                         # the checkout this file is in
"""
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKELETON = HERE.parent.parent / "transformer_lm" / "modeling_attention.py"
START = "# YOUR CODE STARTS HERE"
END = "# YOUR CODE ENDS HERE"
REGIONS = ["1.1", "1.2", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3", "3.4"]


def fill(skeleton, imports, helpers, regions):
    """The skeleton with each TODO region replaced by ``regions[id]``,
    ``imports`` after the skeleton's imports and ``helpers`` after them."""
    lines = skeleton.splitlines()
    out, i, k = [], 0, 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.strip() == START:
            indent = line[:len(line) - len(line.lstrip())]
            j = i + 1
            while lines[j].strip() != END:
                j += 1
            body = textwrap.dedent(regions[REGIONS[k]]).strip("\n")
            out.extend((indent + b) if b.strip() else ""
                       for b in body.splitlines())
            out.append(lines[j])
            k += 1
            i = j + 1
            continue
        if line == "import torch.nn as nn":
            if imports:
                out.extend(textwrap.dedent(imports).strip("\n").splitlines())
            if helpers:
                out.extend(["", ""])
                out.extend(textwrap.dedent(helpers).strip("\n").splitlines())
        i += 1
    assert k == len(REGIONS), k
    return "\n".join(out) + "\n"


GPT2 = """
return MultiHeadAttention(d_in=768, d_out=768, context_length=1024,
                          dropout=0.1, num_heads=12, qkv_bias=True)
"""
LINEARS = """
self.q = nn.Linear(input_size, hidden)
self.k = nn.Linear(input_size, hidden)
self.v = nn.Linear(input_size, hidden)
"""

# -- A: einsum everywhere (ana) ---------------------------------------------
A = dict(imports="import math", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
w = torch.einsum("bqd,bkd->bqk", q, k).div(math.sqrt(q.size(-1)))
# [bs, seq, seq]
return torch.einsum("bqk,bkd->bqd", w.softmax(dim=-1), v)
# [bs, seq, hidden]
""",
    "2.1": """
q = self.q(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
k = self.k(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
v = self.v(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.scale
# [bs, num_heads, seq, seq]
""",
    "2.2": """
future = torch.triu(torch.ones(seq, seq, dtype=torch.bool,
                               device=x.device), diagonal=1)
# [seq, seq]
scores = scores.masked_fill(future, float("-inf"))
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = self.dropout(torch.softmax(scores, dim=-1))
# [bs, num_heads, seq, seq]
att = torch.einsum("bhqk,bkhd->bqhd", probs, v)
# [bs, seq, num_heads, head_size]
att = self.mix(att.reshape(bs, seq, -1))  # [bs, seq, hidden]
probs = probs.reshape(bs * self.num_heads, seq, seq)
# [bs * num_heads, seq, seq]
""",
    "3.1": """
queries = self.W_query(x)  # [b, num_tokens, d_out]
keys = self.W_key(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
scores = torch.einsum("bqd,bkd->bqk", queries, keys)
# [b, num_tokens, num_tokens]
blocked = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
scores = scores.masked_fill(blocked, float("-inf"))
# [b, num_tokens, num_tokens]
weights = torch.softmax(scores / math.sqrt(self.d_out), dim=-1)
# [b, num_tokens, num_tokens]
weights = self.dropout(weights)  # [b, num_tokens, num_tokens]
return torch.einsum("bqk,bkd->bqd", weights, values)
# [b, num_tokens, d_out]
""",
    "3.2": """
return torch.cat([head(x) for head in self.heads], dim=-1)
# [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
shape = (b, num_tokens, self.num_heads, self.head_dim)
queries = self.W_query(x).view(shape)
# [b, num_tokens, num_heads, head_dim]
keys = self.W_key(x).view(shape)
# [b, num_tokens, num_heads, head_dim]
values = self.W_value(x).view(shape)
# [b, num_tokens, num_heads, head_dim]
scores = torch.einsum("bqhd,bkhd->bhqk", queries, keys)
# [b, num_heads, num_tokens, num_tokens]
blocked = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
scores = scores.masked_fill(blocked, float("-inf"))
# [b, num_heads, num_tokens, num_tokens]
weights = torch.softmax(scores / math.sqrt(self.head_dim), dim=-1)
# [b, num_heads, num_tokens, num_tokens]
weights = self.dropout(weights)
# [b, num_heads, num_tokens, num_tokens]
context = torch.einsum("bhqk,bkhd->bqhd", weights, values)
# [b, num_tokens, num_heads, head_dim]
context = context.reshape(b, num_tokens, self.d_out)
# [b, num_tokens, d_out]
return self.out_proj(context)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

# -- B: matmul, loops over heads (ben) --------------------------------------
B = dict(imports="", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
queries = self.q(x)  # [bs, seq, hidden]
keys = self.k(x)  # [bs, seq, hidden]
values = self.v(x)  # [bs, seq, hidden]
scores = torch.matmul(queries, keys.transpose(-2, -1))
# [bs, seq, seq]
scores = scores / (keys.shape[-1] ** 0.5)  # [bs, seq, seq]
weights = torch.softmax(scores, dim=-1)  # [bs, seq, seq]
return torch.matmul(weights, values)  # [bs, seq, hidden]
""",
    "2.1": """
q = self.q(x)  # [bs, seq, hidden]
k = self.k(x)  # [bs, seq, hidden]
v = self.v(x)  # [bs, seq, hidden]
head_scores = []
for h in range(self.num_heads):
    cols = slice(h * self.head_size, (h + 1) * self.head_size)
    s = torch.matmul(q[:, :, cols], k[:, :, cols].transpose(1, 2))
    # [bs, seq, seq]
    head_scores.append(s / self.scale)
scores = torch.stack(head_scores, dim=1)  # [bs, num_heads, seq, seq]
""",
    "2.2": """
allowed = torch.tril(torch.ones(seq, seq, device=x.device))
# [seq, seq]
scores = scores.masked_fill(allowed == 0, -torch.inf)
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = self.dropout(scores.softmax(dim=-1))
# [bs, num_heads, seq, seq]
outs = []
for h in range(self.num_heads):
    cols = slice(h * self.head_size, (h + 1) * self.head_size)
    outs.append(torch.matmul(probs[:, h], v[:, :, cols]))
att = self.mix(torch.cat(outs, dim=-1))  # [bs, seq, hidden]
probs = probs.reshape(-1, seq, seq)  # [bs * num_heads, seq, seq]
""",
    "3.1": """
keys = self.W_key(x)  # [b, num_tokens, d_out]
queries = self.W_query(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
attn_scores = queries @ keys.transpose(1, 2)
# [b, num_tokens, num_tokens]
attn_scores.masked_fill_(
    self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                             dim=-1)  # [b, num_tokens, num_tokens]
attn_weights = self.dropout(attn_weights)
# [b, num_tokens, num_tokens]
context_vec = attn_weights @ values  # [b, num_tokens, d_out]
return context_vec  # [b, num_tokens, d_out]
""",
    "3.2": """
outputs = []
for head in self.heads:
    outputs.append(head(x))
return torch.cat(outputs, dim=-1)
# [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
queries = self.W_query(x)  # [b, num_tokens, d_out]
keys = self.W_key(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
future = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
heads = []
for h in range(self.num_heads):
    lo, hi = h * self.head_dim, (h + 1) * self.head_dim
    q_h = queries[..., lo:hi]  # [b, num_tokens, head_dim]
    k_h = keys[..., lo:hi]  # [b, num_tokens, head_dim]
    v_h = values[..., lo:hi]  # [b, num_tokens, head_dim]
    scores = q_h @ k_h.transpose(1, 2)  # [b, num_tokens, num_tokens]
    scores = scores.masked_fill(future, -torch.inf)
    # [b, num_tokens, num_tokens]
    weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
    # [b, num_tokens, num_tokens]
    weights = self.dropout(weights)  # [b, num_tokens, num_tokens]
    heads.append(weights @ v_h)
context_vec = torch.cat(heads, dim=-1)  # [b, num_tokens, d_out]
return self.out_proj(context_vec)  # [b, num_tokens, d_out]
""",
    "3.4": """
return MultiHeadAttention(768, 768, 1024, 0.1, 12, True)
""",
})

# -- C: typed helpers and a dataclass (chen) --------------------------------
C = dict(imports="""
from dataclasses import dataclass
import math

from torch import Tensor
""", helpers='''
@dataclass(frozen=True)
class HeadLayout:
    """How a projection of num_heads * head_size features splits."""

    num_heads: int
    head_size: int

    def split(self, t: Tensor) -> Tensor:
        """[bs, seq, hidden] -> [bs, num_heads, seq, head_size]."""
        bs, seq, _ = t.shape
        return t.view(bs, seq, self.num_heads, self.head_size).transpose(1, 2)
        # [bs, num_heads, seq, head_size]

    def merge(self, t: Tensor) -> Tensor:
        """[bs, num_heads, seq, head_size] -> [bs, seq, hidden]."""
        bs, _, seq, _ = t.shape
        return t.transpose(1, 2).reshape(bs, seq, -1)
        # [bs, seq, num_heads * head_size]


def scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """q k^T / sqrt(d) for one head: [bs, seq, seq]."""
    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
    # [bs, seq, seq]
''', regions={
    "1.1": LINEARS,
    "1.2": """
q: Tensor = self.q(x)  # [bs, seq, hidden]
k: Tensor = self.k(x)  # [bs, seq, hidden]
v: Tensor = self.v(x)  # [bs, seq, hidden]
probs: Tensor = scaled_scores(q, k).softmax(dim=-1)  # [bs, seq, seq]
return probs @ v  # [bs, seq, hidden]
""",
    "2.1": """
layout = HeadLayout(self.num_heads, self.head_size)
q = layout.split(self.q(x))  # [bs, num_heads, seq, head_size]
k = layout.split(self.k(x))  # [bs, num_heads, seq, head_size]
v = layout.split(self.v(x))  # [bs, num_heads, seq, head_size]
scores = q @ k.transpose(-2, -1) / self.scale
# [bs, num_heads, seq, seq]
""",
    "2.2": """
future = torch.ones(seq, seq, dtype=torch.bool)  # [seq, seq]
future = future.triu(diagonal=1)  # [seq, seq]
scores = scores.masked_fill(future, -torch.inf)
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = self.dropout(scores.softmax(dim=-1))
# [bs, num_heads, seq, seq]
att = self.mix(layout.merge(probs @ v))  # [bs, seq, hidden]
probs = probs.reshape(bs * self.num_heads, seq, seq)
# [bs * num_heads, seq, seq]
""",
    "3.1": """
queries: Tensor = self.W_query(x)  # [b, num_tokens, d_out]
keys: Tensor = self.W_key(x)  # [b, num_tokens, d_out]
values: Tensor = self.W_value(x)  # [b, num_tokens, d_out]
scores = queries @ keys.transpose(1, 2)  # [b, num_tokens, num_tokens]
future = self.mask[:num_tokens, :num_tokens].bool()
# [num_tokens, num_tokens]
scores = scores.masked_fill(future, -torch.inf)
# [b, num_tokens, num_tokens]
weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)
# [b, num_tokens, num_tokens]
weights = self.dropout(weights)  # [b, num_tokens, num_tokens]
context = weights @ values  # [b, num_tokens, d_out]
return context  # [b, num_tokens, d_out]
""",
    "3.2": """
outs = [head(x) for head in self.heads]
return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
layout = HeadLayout(self.num_heads, self.head_dim)
queries = layout.split(self.W_query(x))
# [b, num_heads, num_tokens, head_dim]
keys = layout.split(self.W_key(x))
# [b, num_heads, num_tokens, head_dim]
values = layout.split(self.W_value(x))
# [b, num_heads, num_tokens, head_dim]
scores = queries @ keys.transpose(-2, -1)
# [b, num_heads, num_tokens, num_tokens]
future = self.mask[:num_tokens, :num_tokens].bool()
# [num_tokens, num_tokens]
scores = scores.masked_fill(future, -torch.inf)
# [b, num_heads, num_tokens, num_tokens]
weights = torch.softmax(scores / math.sqrt(self.head_dim), dim=-1)
# [b, num_heads, num_tokens, num_tokens]
weights = self.dropout(weights)
# [b, num_heads, num_tokens, num_tokens]
context = layout.merge(weights @ values)  # [b, num_tokens, d_out]
return self.out_proj(context)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

# -- D: bmm with the heads folded into the batch (dara) ---------------------
D = dict(imports="import torch.nn.functional as F", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
probs = F.softmax(torch.bmm(q, k.transpose(1, 2)) / q.shape[-1] ** 0.5,
                  -1)  # [bs, seq, seq]
return torch.bmm(probs, v)  # [bs, seq, hidden]
""",
    "2.1": """
h, hs = self.num_heads, self.head_size
q = self.q(x).view(bs, seq, h, hs).transpose(1, 2)
# [bs, num_heads, seq, head_size]
q = q.reshape(bs * h, seq, hs)  # [bs * num_heads, seq, head_size]
k = self.k(x).view(bs, seq, h, hs).transpose(1, 2)
# [bs, num_heads, seq, head_size]
k = k.reshape(bs * h, seq, hs)  # [bs * num_heads, seq, head_size]
v = self.v(x).view(bs, seq, h, hs).transpose(1, 2)
# [bs, num_heads, seq, head_size]
v = v.reshape(bs * h, seq, hs)  # [bs * num_heads, seq, head_size]
scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
# [bs * num_heads, seq, seq]
""",
    "2.2": """
keep = torch.ones(seq, seq, device=x.device).tril().bool()
# [seq, seq]
scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
# [bs * num_heads, seq, seq]
""",
    "2.3": """
probs = self.dropout(F.softmax(scores, dim=-1))
# [bs * num_heads, seq, seq]
att = torch.bmm(probs, v)  # [bs * num_heads, seq, head_size]
att = att.view(bs, h, seq, hs).transpose(1, 2).reshape(bs, seq, -1)
# [bs, seq, hidden]
att = self.mix(att)  # [bs, seq, hidden]
""",
    "3.1": """
queries = self.W_query(x)  # [b, num_tokens, d_out]
keys = self.W_key(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
scores = torch.bmm(queries, keys.transpose(1, 2))
# [b, num_tokens, num_tokens]
mask = self.mask[:num_tokens, :num_tokens] == 1
# [num_tokens, num_tokens]
scores = scores.masked_fill(mask, float("-inf"))
# [b, num_tokens, num_tokens]
weights = F.softmax(scores / self.d_out ** 0.5, dim=-1)
# [b, num_tokens, num_tokens]
weights = self.dropout(weights)  # [b, num_tokens, num_tokens]
return torch.bmm(weights, values)  # [b, num_tokens, d_out]
""",
    "3.2": """
return torch.cat([head(x) for head in self.heads], dim=2)
# [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
h, hd = self.num_heads, self.head_dim
queries = self.W_query(x).view(b, num_tokens, h, hd).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
queries = queries.reshape(b * h, num_tokens, hd)
# [b * num_heads, num_tokens, head_dim]
keys = self.W_key(x).view(b, num_tokens, h, hd).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
keys = keys.reshape(b * h, num_tokens, hd)
# [b * num_heads, num_tokens, head_dim]
values = self.W_value(x).view(b, num_tokens, h, hd).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
values = values.reshape(b * h, num_tokens, hd)
# [b * num_heads, num_tokens, head_dim]
scores = torch.bmm(queries, keys.transpose(1, 2))
# [b * num_heads, num_tokens, num_tokens]
mask = self.mask[:num_tokens, :num_tokens] == 1
# [num_tokens, num_tokens]
scores = scores.masked_fill(mask, float("-inf"))
# [b * num_heads, num_tokens, num_tokens]
weights = F.softmax(scores / hd ** 0.5, dim=-1)
# [b * num_heads, num_tokens, num_tokens]
weights = self.dropout(weights)
# [b * num_heads, num_tokens, num_tokens]
context = torch.bmm(weights, values)
# [b * num_heads, num_tokens, head_dim]
context = context.view(b, h, num_tokens, hd).transpose(1, 2)
# [b, num_tokens, num_heads, head_dim]
context = context.reshape(b, num_tokens, self.d_out)
# [b, num_tokens, d_out]
return self.out_proj(context)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

# -- E: torch.nn.functional with scaled_dot_product_attention (eli) ---------
E = dict(imports="import torch.nn.functional as F", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x))
# [bs, seq, hidden]
""",
    "2.1": """
q = self.q(x).unflatten(-1, (self.num_heads, self.head_size))
# [bs, seq, num_heads, head_size]
k = self.k(x).unflatten(-1, (self.num_heads, self.head_size))
# [bs, seq, num_heads, head_size]
v = self.v(x).unflatten(-1, (self.num_heads, self.head_size))
# [bs, seq, num_heads, head_size]
q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
# [bs, num_heads, seq, head_size]
scores = q @ k.mT / self.scale  # [bs, num_heads, seq, seq]
""",
    "2.2": """
future = torch.ones_like(scores, dtype=torch.bool).triu(1)
# [bs, num_heads, seq, seq]
scores = scores.masked_fill(future, float("-inf"))
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = F.dropout(F.softmax(scores, dim=-1), p=self.dropout.p,
                  training=self.training)
# [bs, num_heads, seq, seq]
att = (probs @ v).transpose(1, 2).flatten(2)  # [bs, seq, hidden]
att = self.mix(att)  # [bs, seq, hidden]
probs = probs.flatten(0, 1)  # [bs * num_heads, seq, seq]
""",
    "3.1": """
return F.scaled_dot_product_attention(
    self.W_query(x), self.W_key(x), self.W_value(x),
    dropout_p=self.dropout.p if self.training else 0.0,
    is_causal=True,
)  # [b, num_tokens, d_out]
""",
    "3.2": """
return torch.cat([head(x) for head in self.heads], dim=-1)
# [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
split = (b, num_tokens, self.num_heads, self.head_dim)
q = self.W_query(x).view(split).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
k = self.W_key(x).view(split).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
v = self.W_value(x).view(split).transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
ctx = F.scaled_dot_product_attention(
    q, k, v, dropout_p=self.dropout.p if self.training else 0.0,
    is_causal=True)  # [b, num_heads, num_tokens, head_dim]
ctx = ctx.transpose(1, 2).reshape(b, num_tokens, self.d_out)
# [b, num_tokens, d_out]
return self.out_proj(ctx)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

# -- F: einops (fay) ---------------------------------------------------------
F_ = dict(imports="from einops import rearrange", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
w = (q @ rearrange(k, "b s d -> b d s")) / q.shape[-1] ** 0.5
# [bs, seq, seq]
return w.softmax(-1) @ v  # [bs, seq, hidden]
""",
    "2.1": """
q = rearrange(self.q(x), "b s (h d) -> b h s d", h=self.num_heads)
# [bs, num_heads, seq, head_size]
k = rearrange(self.k(x), "b s (h d) -> b h s d", h=self.num_heads)
# [bs, num_heads, seq, head_size]
v = rearrange(self.v(x), "b s (h d) -> b h s d", h=self.num_heads)
# [bs, num_heads, seq, head_size]
scores = torch.einsum("bhid,bhjd->bhij", q, k) / self.scale
# [bs, num_heads, seq, seq]
""",
    "2.2": """
causal = torch.ones(seq, seq, device=x.device).tril().bool()
# [seq, seq]
scores = scores.masked_fill(~causal, -torch.inf)
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = self.dropout(scores.softmax(dim=-1))
# [bs, num_heads, seq, seq]
att = rearrange(probs @ v, "b h s d -> b s (h d)")  # [bs, seq, hidden]
att = self.mix(att)  # [bs, seq, hidden]
probs = rearrange(probs, "b h i j -> (b h) i j")
# [bs * num_heads, seq, seq]
""",
    "3.1": """
queries = self.W_query(x)  # [b, num_tokens, d_out]
keys = self.W_key(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
attn_scores = queries @ rearrange(keys, "b t d -> b d t")
# [b, num_tokens, num_tokens]
mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
# [b, num_tokens, num_tokens]
attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, -1)
# [b, num_tokens, num_tokens]
attn_weights = self.dropout(attn_weights)
# [b, num_tokens, num_tokens]
return attn_weights @ values  # [b, num_tokens, d_out]
""",
    "3.2": """
return torch.cat([head(x) for head in self.heads], dim=-1)
# [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
pattern = "b t (h d) -> b h t d"
queries = rearrange(self.W_query(x), pattern, h=self.num_heads)
# [b, num_heads, num_tokens, head_dim]
keys = rearrange(self.W_key(x), pattern, h=self.num_heads)
# [b, num_heads, num_tokens, head_dim]
values = rearrange(self.W_value(x), pattern, h=self.num_heads)
# [b, num_heads, num_tokens, head_dim]
attn_scores = queries @ rearrange(keys, "b h t d -> b h d t")
# [b, num_heads, num_tokens, num_tokens]
mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
# [b, num_heads, num_tokens, num_tokens]
attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, -1)
# [b, num_heads, num_tokens, num_tokens]
attn_weights = self.dropout(attn_weights)
# [b, num_heads, num_tokens, num_tokens]
context = rearrange(attn_weights @ values, "b h t d -> b t (h d)")
# [b, num_tokens, d_out]
return self.out_proj(context)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

# -- G: unusual but correct (gus): cached mask rebuilt when too short,
# torch.finfo.min, softmax in float64, the mask's bottom-right corner ------
G = dict(imports="import torch.nn.functional as F", helpers="", regions={
    "1.1": LINEARS,
    "1.2": """
q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
probs = F.softmax(q.bmm(k.transpose(1, 2)) * q.shape[-1] ** -0.5, -1)
# [bs, seq, seq]
return probs.bmm(v)  # [bs, seq, hidden]
""",
    "2.1": """
q = self.q(x).view(bs, seq, self.num_heads, -1).permute(0, 2, 1, 3)
# [bs, num_heads, seq, head_size]
k = self.k(x).view(bs, seq, self.num_heads, -1).permute(0, 2, 3, 1)
# [bs, num_heads, head_size, seq]
v = self.v(x).view(bs, seq, self.num_heads, -1).permute(0, 2, 1, 3)
# [bs, num_heads, seq, head_size]
scores = torch.matmul(q, k) / self.scale  # [bs, num_heads, seq, seq]
""",
    "2.2": """
cache = getattr(self, "_future", None)
if cache is None or cache.shape[-1] < seq:
    cache = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    # [seq, seq]
    self._future = cache
scores = scores.masked_fill(cache[:seq, :seq],
                            torch.finfo(scores.dtype).min)
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = scores.double().softmax(dim=-1).to(scores.dtype)
# [bs, num_heads, seq, seq]
probs = self.dropout(probs)  # [bs, num_heads, seq, seq]
att = torch.matmul(probs, v).permute(0, 2, 1, 3).flatten(2)
# [bs, seq, hidden]
att = self.mix(att)  # [bs, seq, hidden]
probs = probs.view(-1, seq, seq)  # [bs * num_heads, seq, seq]
""",
    "3.1": """
queries = self.W_query(x)  # [b, num_tokens, d_out]
keys = self.W_key(x)  # [b, num_tokens, d_out]
values = self.W_value(x)  # [b, num_tokens, d_out]
attn_scores = queries @ keys.mT  # [b, num_tokens, num_tokens]
mask_bool = self.mask.bool()[-num_tokens:, -num_tokens:]
# [num_tokens, num_tokens]
attn_scores = torch.where(mask_bool, -torch.inf, attn_scores)
# [b, num_tokens, num_tokens]
attn_weights = (attn_scores / keys.shape[-1] ** 0.5).double()
# [b, num_tokens, num_tokens]
attn_weights = attn_weights.softmax(-1)
# [b, num_tokens, num_tokens]
attn_weights = self.dropout(attn_weights.float())
# [b, num_tokens, num_tokens]
return attn_weights @ values  # [b, num_tokens, d_out]
""",
    "3.2": """
return torch.concat([self.heads[i](x) for i in range(len(self.heads))],
                    dim=2)  # [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
queries = self.W_query(x).unflatten(2, (self.num_heads, self.head_dim))
# [b, num_tokens, num_heads, head_dim]
keys = self.W_key(x).unflatten(2, (self.num_heads, self.head_dim))
# [b, num_tokens, num_heads, head_dim]
values = self.W_value(x).unflatten(2, (self.num_heads, self.head_dim))
# [b, num_tokens, num_heads, head_dim]
queries, keys, values = (
    t.transpose(1, 2) for t in (queries, keys, values)
)  # [b, num_heads, num_tokens, head_dim]
attn_scores = queries @ keys.mT / self.head_dim ** 0.5
# [b, num_heads, num_tokens, num_tokens]
mask_bool = self.mask.bool()[-num_tokens:, -num_tokens:]
# [num_tokens, num_tokens]
attn_scores = attn_scores.masked_fill(
    mask_bool, torch.finfo(attn_scores.dtype).min)
# [b, num_heads, num_tokens, num_tokens]
attn_weights = F.dropout(attn_scores.softmax(-1), self.dropout.p,
                         self.training)
# [b, num_heads, num_tokens, num_tokens]
context_vec = (attn_weights @ values).transpose(1, 2).flatten(2)
# [b, num_tokens, d_out]
return self.out_proj(context_vec)  # [b, num_tokens, d_out]
""",
    "3.4": """
layer = MultiHeadAttention(768, 768, context_length=1024, dropout=0.1,
                           num_heads=12, qkv_bias=True)
return layer
""",
})

# -- H: functional, permute + contiguous().view, -1e9 fill (hana) -----------
H = dict(imports="import torch.nn.functional as F", helpers="", regions={
    "1.1": """
self.q, self.k, self.v = (nn.Linear(input_size, hidden)
                          for _ in range(3))
""",
    "1.2": """
q = self.q(x)  # [bs, seq, hidden]
scores = q @ self.k(x).permute(0, 2, 1) / q.size(-1) ** 0.5
# [bs, seq, seq]
return F.softmax(scores, dim=2) @ self.v(x)  # [bs, seq, hidden]
""",
    "2.1": """
q = self.q(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
q = q.permute(0, 2, 1, 3)  # [bs, num_heads, seq, head_size]
k = self.k(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
k = k.permute(0, 2, 1, 3)  # [bs, num_heads, seq, head_size]
v = self.v(x).view(bs, seq, self.num_heads, self.head_size)
# [bs, seq, num_heads, head_size]
v = v.permute(0, 2, 1, 3)  # [bs, num_heads, seq, head_size]
scores = q @ k.permute(0, 1, 3, 2) / self.scale
# [bs, num_heads, seq, seq]
""",
    "2.2": """
upper = torch.triu(torch.ones(seq, seq), 1).to(torch.bool)
# [seq, seq]
scores = scores.masked_fill(upper, -1e9)
# [bs, num_heads, seq, seq]
""",
    "2.3": """
probs = F.softmax(scores, dim=-1)  # [bs, num_heads, seq, seq]
probs = F.dropout(probs, p=self.dropout.p, training=self.training)
# [bs, num_heads, seq, seq]
att = (probs @ v).permute(0, 2, 1, 3).contiguous()
# [bs, seq, num_heads, head_size]
att = self.mix(att.view(bs, seq, self.num_heads * self.head_size))
# [bs, seq, hidden]
probs = probs.reshape(bs * self.num_heads, seq, seq)
# [bs * num_heads, seq, seq]
""",
    "3.1": """
q = self.W_query(x)  # [b, num_tokens, d_out]
k = self.W_key(x)  # [b, num_tokens, d_out]
v = self.W_value(x)  # [b, num_tokens, d_out]
att = q @ k.transpose(-2, -1) / k.size(-1) ** 0.5
# [b, num_tokens, num_tokens]
att = att.masked_fill(self.mask[:num_tokens, :num_tokens] == 1, -1e9)
# [b, num_tokens, num_tokens]
att = F.dropout(F.softmax(att, dim=-1), self.dropout.p, self.training)
# [b, num_tokens, num_tokens]
return att @ v  # [b, num_tokens, d_out]
""",
    "3.2": """
outs = list(map(lambda head: head(x), self.heads))
return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]
""",
    "3.3": """
q = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim)
# [b, num_tokens, num_heads, head_dim]
k = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim)
# [b, num_tokens, num_heads, head_dim]
v = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim)
# [b, num_tokens, num_heads, head_dim]
q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
# [b, num_heads, num_tokens, head_dim]
att = (q @ k.transpose(2, 3)) * (1.0 / self.head_dim ** 0.5)
# [b, num_heads, num_tokens, num_tokens]
future = self.mask.bool()[:num_tokens, :num_tokens]
# [num_tokens, num_tokens]
att.masked_fill_(future, -torch.inf)
att = F.softmax(att, dim=-1)  # [b, num_heads, num_tokens, num_tokens]
att = self.dropout(att)  # [b, num_heads, num_tokens, num_tokens]
y = (att @ v).transpose(1, 2).contiguous()
# [b, num_tokens, num_heads, head_dim]
y = y.view(b, num_tokens, self.d_out)  # [b, num_tokens, d_out]
return self.out_proj(y)  # [b, num_tokens, d_out]
""",
    "3.4": GPT2,
})

BASES = {"A_einsum": A, "B_loops": B, "C_typed": C, "D_bmm": D,
         "E_sdpa": E, "F_einops": F_, "G_unusual": G, "H_functional": H}

# -- the bugged submissions: (base, [(exact text, replacement), ...]) -------
# What each edit means, and what it should cost, is in key.toml only.
BUGS = {
    "sub09": ("A_einsum", [
        ('.div(math.sqrt(q.size(-1)))', '.div(q.size(-1) ** 1 / 2)')]),
    "sub10": ("B_loops", [
        ('attn_scores / keys.shape[-1] ** 0.5',
         'attn_scores / keys.shape[1] ** 0.5')]),
    "sub11": ("A_einsum", [
        ('device=x.device), diagonal=1)', 'device=x.device), diagonal=2)')]),
    "sub12": ("H_functional", [
        ('future = self.mask.bool()[:num_tokens, :num_tokens]',
         'future = self.mask.bool()[:num_tokens, -num_tokens:]')]),
    "sub13": ("F_einops", [
        ('probs = self.dropout(scores.softmax(dim=-1))',
         'probs = self.dropout(scores.softmax(dim=1))')]),
    "sub14": ("B_loops", [
        ('att = self.mix(torch.cat(outs, dim=-1))  # [bs, seq, hidden]',
         'att = torch.cat(outs, dim=-1)  # [bs, seq, hidden]\n'
         '        att = att @ self.mix.weight + self.mix.bias  # [bs, seq, hidden]')]),
    "sub15": ("A_einsum", [
        ('return torch.einsum("bqk,bkd->bqd", weights, values)',
         'return torch.einsum("bqk,bkd->bqd", weights, keys)')]),
    "sub16": ("D_bmm", [
        ('context = context.view(b, h, num_tokens, hd).transpose(1, 2)\n'
         '        # [b, num_tokens, num_heads, head_dim]',
         'context = context.view(b, h, num_tokens, hd).permute(0, 2, 3, 1)\n'
         '        # [b, num_tokens, head_dim, num_heads]')]),
    "sub17": ("F_einops", [
        ('att = rearrange(probs @ v, "b h s d -> b s (h d)")',
         'att = rearrange(probs @ v, "b h s d -> b s (d h)")')]),
    "sub18": ("C_typed", [
        ('return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]',
         'b, num_tokens, _ = x.shape\n'
         '        return torch.stack(outs, dim=1).reshape(b, num_tokens, -1)\n'
         '        # [b, num_tokens, num_heads * d_out]')]),
    "sub19": ("G_unusual", [
        ('return torch.concat([self.heads[i](x) for i in range(len(self.heads))],\n'
         '                            dim=2)  # [b, num_tokens, num_heads * d_out]',
         'return torch.hstack([self.heads[i](x)\n'
         '                             for i in range(len(self.heads))])\n'
         '        # [b, num_tokens, num_heads * d_out]')]),
    "sub20": ("B_loops", [
        ('attn_weights = self.dropout(attn_weights)\n'
         '        # [b, num_tokens, num_tokens]',
         'if self.training:\n'
         '            keep = torch.rand_like(attn_weights) >= self.dropout.p\n'
         '            # [b, num_tokens, num_tokens]\n'
         '            attn_weights = attn_weights * keep\n'
         '            # [b, num_tokens, num_tokens]')]),
    "sub21": ("E_sdpa", [
        ('''ctx = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout.p if self.training else 0.0,
            is_causal=True)  # [b, num_heads, num_tokens, head_dim]''',
         '''ctx = F.scaled_dot_product_attention(
            q, k, v, is_causal=True)  # [b, num_heads, num_tokens, head_dim]'''),
        ('return self.out_proj(ctx)  # [b, num_tokens, d_out]',
         'return self.dropout(self.out_proj(ctx))  # [b, num_tokens, d_out]')]),
    "sub22": ("A_einsum", [
        ('dropout=0.1, num_heads=12, qkv_bias=True)',
         'dropout=0.1, num_heads=12)')]),
    "sub23": ("G_unusual", [
        ('if cache is None or cache.shape[-1] < seq:', 'if cache is None:')]),
    "sub24": ("H_functional", [
        ('probs = probs.reshape(bs * self.num_heads, seq, seq)',
         'probs = probs.transpose(0, 1).reshape(bs * self.num_heads, seq, seq)')]),
    "sub25": ("C_typed", [
        ('layout = HeadLayout(self.num_heads, self.head_dim)',
         'layout = HeadLayout(self.num_heads, d_in // self.num_heads)')]),
    "sub26": ("E_sdpa", [
        ('''    self.W_query(x), self.W_key(x), self.W_value(x),
            dropout_p=self.dropout.p if self.training else 0.0,
            is_causal=True,''',
         '''    self.W_query(x), self.W_key(x), self.W_value(x),
            attn_mask=self.mask.bool()[:num_tokens, :num_tokens],
            dropout_p=self.dropout.p if self.training else 0.0,''')]),
    "sub27": ("A_einsum", [
        ('w = torch.einsum("bqd,bkd->bqk", q, k)', 'w = torch.einsum("bqd,bkd->bqk", k, q)')]),
    "sub28": ("F_einops", [
        ('v = rearrange(self.v(x), "b s (h d) -> b h s d", h=self.num_heads)',
         'v = rearrange(self.k(x), "b s (h d) -> b h s d", h=self.num_heads)')]),
    "sub29": ("C_typed", [
        ('context = weights @ values  # [b, num_tokens, d_out]\n'
         '        return context  # [b, num_tokens, d_out]',
         'context = weights @ values  # [b, num_tokens, d_out]')]),
    "sub30": ("H_functional", [
        ('att = att.masked_fill(self.mask[:num_tokens, :num_tokens] == 1, -1e9)',
         'self.mask = self.mask[:num_tokens, :num_tokens]\n'
         '        # [num_tokens, num_tokens]\n'
         '        att = att.masked_fill(self.mask == 1, -1e9)')]),
    # two bugs each
    "sub31": ("B_loops", [
        ('weights = torch.softmax(scores, dim=-1)  # [bs, seq, seq]',
         'weights = torch.softmax(scores, dim=0)  # [bs, seq, seq]'),
        ('    v_h = values[..., lo:hi]  # [b, num_tokens, head_dim]',
         '    v_h = values[..., :self.head_dim]  # [b, num_tokens, head_dim]')]),
    "sub32": ("D_bmm", [
        ('probs = self.dropout(F.softmax(scores, dim=-1))',
         'probs = F.softmax(self.dropout(scores), dim=-1)'),
        ('dropout=0.1, num_heads=12, qkv_bias=True)',
         'dropout=0.1, num_heads=8, qkv_bias=True)')]),
    "sub33": ("E_sdpa", [
        ('scores = q @ k.mT / self.scale', 'scores = q @ k.mT * self.scale'),
        ('    q, k, v, dropout_p=self.dropout.p if self.training else 0.0,',
         '    k, q, v, dropout_p=self.dropout.p if self.training else 0.0,')]),
    "sub34": ("H_functional", [
        ('probs = probs.reshape(bs * self.num_heads, seq, seq)',
         'probs = probs.transpose(0, 1).reshape(bs * self.num_heads, seq, seq)'),
        ('outs = list(map(lambda head: head(x), self.heads))\n'
         '        return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]',
         'outs = list(map(lambda head: head(x), self.heads))\n'
         '        b, num_tokens, _ = x.shape\n'
         '        return torch.cat(outs, dim=0).view(b, num_tokens, -1)\n'
         '        # [b, num_tokens, num_heads * d_out]')]),
}
CORRECT = {"sub01": "A_einsum", "sub02": "B_loops", "sub03": "C_typed",
           "sub04": "D_bmm", "sub05": "E_sdpa", "sub06": "F_einops",
           "sub07": "G_unusual", "sub08": "H_functional"}


def main():
    skeleton = Path(sys.argv[1] if len(sys.argv) > 1 else SKELETON)
    text = skeleton.read_text()
    built = {name: fill(text, **base) for name, base in BASES.items()}
    out = HERE / "submissions"
    out.mkdir(exist_ok=True)
    for sub, base in CORRECT.items():
        (out / f"{sub}.py").write_text(built[base])
    for sub, (base, edits) in BUGS.items():
        src = built[base]
        for old, new in edits:
            assert src.count(old) == 1, (sub, old, src.count(old))
            src = src.replace(old, new)
        (out / f"{sub}.py").write_text(src)
    print(f"{len(CORRECT) + len(BUGS)} submissions in {out}")


if __name__ == "__main__":
    main()
