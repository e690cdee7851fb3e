from gen import fill
IMPORTS = """import math

import torch
import torch.nn as nn
"""
B = [
'''        self.q = nn.Linear(in_features=input_size, out_features=hidden)
        self.k = nn.Linear(in_features=input_size, out_features=hidden)
        self.v = nn.Linear(in_features=input_size, out_features=hidden)
''',
'''        q = self.q(x)  # [bs, seq, hidden]
        k = self.k(x)  # [bs, seq, hidden]
        v = self.v(x)  # [bs, seq, hidden]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        # [bs, seq, seq]
        return torch.matmul(torch.softmax(scores, dim=-1), v)
        # [bs, seq, hidden]
''',
'''        q = self.q(x)  # [bs, seq, hidden]
        k = self.k(x)  # [bs, seq, hidden]
        v = self.v(x)  # [bs, seq, hidden]
        per_head = []
        for h in range(self.num_heads):
            lo, hi = h * self.head_size, (h + 1) * self.head_size
            q_h = q[:, :, lo:hi]  # [bs, seq, head_size]
            k_h = k[:, :, lo:hi]  # [bs, seq, head_size]
            s_h = torch.matmul(q_h, k_h.transpose(-2, -1))  # [bs, seq, seq]
            per_head.append(s_h / self.scale)
        scores = torch.stack(per_head, dim=1)  # [bs, num_heads, seq, seq]
''',
'''            future = torch.triu(torch.ones(seq, seq, dtype=torch.bool,
                                           device=x.device), diagonal=1)
            # [seq, seq]
            scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
            # [bs, num_heads, seq, seq]
''',
'''        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [bs, num_heads, seq, seq]
        outs = []
        for h in range(self.num_heads):
            lo = h * self.head_size
            v_h = v[:, :, lo:lo + self.head_size]  # [bs, seq, head_size]
            outs.append(torch.matmul(probs[:, h], v_h))
        att = self.mix(torch.cat(outs, dim=-1))  # [bs, seq, hidden]
        probs = probs.flatten(0, 1)  # [bs * num_heads, seq, seq]
''',
'''        queries = self.W_query(x)  # [b, num_tokens, d_out]
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        values = self.W_value(x)  # [b, num_tokens, d_out]
        attn_scores = torch.matmul(queries, keys.transpose(-2, -1))
        # [b, num_tokens, num_tokens]
        future = self.mask[:num_tokens, :num_tokens] == 1
        # [num_tokens, num_tokens]
        attn_scores = torch.where(future, -math.inf, attn_scores)
        # [b, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / math.sqrt(self.d_out),
                                     dim=-1)  # [b, num_tokens, num_tokens]
        attn_weights = self.dropout(attn_weights)
        # [b, num_tokens, num_tokens]
        return torch.matmul(attn_weights, values)  # [b, num_tokens, d_out]
''',
'''        outs = []
        for head in self.heads:
            outs.append(head(x))
        return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]
''',
'''        q = self.W_query(x)  # [b, num_tokens, d_out]
        k = self.W_key(x)  # [b, num_tokens, d_out]
        v = self.W_value(x)  # [b, num_tokens, d_out]
        future = self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        ctx = []
        for h in range(self.num_heads):
            sl = slice(h * self.head_dim, (h + 1) * self.head_dim)
            s = q[..., sl] @ k[..., sl].transpose(1, 2)
            # [b, num_tokens, num_tokens]
            s = s.masked_fill(future, -torch.inf)
            # [b, num_tokens, num_tokens]
            w = torch.softmax(s / math.sqrt(self.head_dim), dim=-1)
            # [b, num_tokens, num_tokens]
            w = self.dropout(w)  # [b, num_tokens, num_tokens]
            ctx.append(w @ v[..., sl])
        context = torch.cat(ctx, dim=-1)  # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
''',
'''    gpt2 = dict(d_in=768, d_out=768, context_length=1024, dropout=0.1,
                num_heads=12, qkv_bias=True)
    return MultiHeadAttention(**gpt2)
''']
TEXT = fill(IMPORTS, B)
