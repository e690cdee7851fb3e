from gen import fill
IMPORTS = """import torch
import torch.nn as nn
from einops import einsum, rearrange
"""
B = [None,
'''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        w = einsum(q, k, "b i d, b j d -> b i j") / q.shape[-1] ** 0.5
        # [bs, seq, seq]
        return einsum(w.softmax(dim=-1), v, "b i j, b j d -> b i d")
        # [bs, seq, hidden]
''',
'''        h = self.num_heads
        q = rearrange(self.q(x), "b s (h d) -> b h s d", h=h)
        # [bs, heads, seq, head_size]
        k = rearrange(self.k(x), "b s (h d) -> b h s d", h=h)
        # [bs, heads, seq, head_size]
        v = rearrange(self.v(x), "b s (h d) -> b h s d", h=h)
        # [bs, heads, seq, head_size]
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") / self.scale
        # [bs, heads, seq, seq]
''',
'''            keep = torch.tril(torch.ones(seq, seq, device=x.device)) > 0
            # [seq, seq]
            scores = scores.masked_fill(~keep, float("-inf"))
            # [bs, heads, seq, seq]
''',
'''        probs = self.dropout(scores.softmax(dim=-1))  # [bs, heads, seq, seq]
        att = einsum(probs, v, "b h i j, b h j d -> b h i d")
        # [bs, heads, seq, head_size]
        att = self.mix(rearrange(att, "b h s d -> b s (h d)"))
        # [bs, seq, hidden]
        probs = rearrange(probs, "b h i j -> (b h) i j")
        # [bs * heads, seq, seq]
''',
'''        q = self.W_query(x)  # [b, num_tokens, d_out]
        k = self.W_key(x)  # [b, num_tokens, d_out]
        v = self.W_value(x)  # [b, num_tokens, d_out]
        s = einsum(q, k, "b i d, b j d -> b i j")
        # [b, num_tokens, num_tokens]
        hide = self.mask[:num_tokens, :num_tokens].bool()
        # [num_tokens, num_tokens]
        s = s.masked_fill(hide, -torch.inf)  # [b, num_tokens, num_tokens]
        w = self.dropout(torch.softmax(s / self.d_out ** 0.5, dim=-1))
        # [b, num_tokens, num_tokens]
        return einsum(w, v, "b i j, b j d -> b i d")  # [b, num_tokens, d_out]
''',
'''        return rearrange([head(x) for head in self.heads],
                         "n b t d -> b t (n d)")
        # [b, num_tokens, num_heads * d_out]
''',
'''        h = self.num_heads
        q = rearrange(self.W_query(x), "b t (h d) -> b h t d", h=h)
        # [b, num_heads, num_tokens, head_dim]
        k = rearrange(self.W_key(x), "b t (h d) -> b h t d", h=h)
        # [b, num_heads, num_tokens, head_dim]
        v = rearrange(self.W_value(x), "b t (h d) -> b h t d", h=h)
        # [b, num_heads, num_tokens, head_dim]
        s = einsum(q, k, "b h i d, b h j d -> b h i j")
        # [b, num_heads, num_tokens, num_tokens]
        hide = self.mask[:num_tokens, :num_tokens].bool()
        # [num_tokens, num_tokens]
        s = s.masked_fill(hide, -torch.inf)
        # [b, num_heads, num_tokens, num_tokens]
        w = self.dropout(torch.softmax(s / self.head_dim ** 0.5, dim=-1))
        # [b, num_heads, num_tokens, num_tokens]
        ctx = einsum(w, v, "b h i j, b h j d -> b h i d")
        # [b, num_heads, num_tokens, head_dim]
        ctx = rearrange(ctx, "b h t d -> b t (h d)")  # [b, num_tokens, d_out]
        return self.out_proj(ctx)  # [b, num_tokens, d_out]
''',
'''    return MultiHeadAttention(d_in=768, d_out=768, context_length=1024,
                              dropout=0.1, num_heads=12, qkv_bias=True)
''']
# 1.1 block keep reference
TEXT = fill(IMPORTS, B)
