from gen import fill
IMPORTS = """import torch
import torch.nn as nn
import torch.nn.functional as F
"""
B = [None,
'''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        return F.scaled_dot_product_attention(q, k, v)  # [bs, seq, hidden]
''',
'''        split = (bs, seq, self.num_heads, self.head_size)
        q = F.linear(x, self.q.weight, self.q.bias).view(split).transpose(1, 2)
        # [bs, heads, seq, head_size]
        k = F.linear(x, self.k.weight, self.k.bias).view(split).transpose(1, 2)
        # [bs, heads, seq, head_size]
        v = F.linear(x, self.v.weight, self.v.bias).view(split).transpose(1, 2)
        # [bs, heads, seq, head_size]
        scores = torch.matmul(q, k.mT) / self.scale  # [bs, heads, seq, seq]
''',
'''            allowed = torch.ones(seq, seq, dtype=torch.bool,
                                 device=x.device).tril()  # [seq, seq]
            scores = scores.masked_fill(allowed.logical_not(), -torch.inf)
            # [bs, heads, seq, seq]
''',
'''        probs = F.dropout(F.softmax(scores, dim=-1), p=self.dropout.p,
                          training=self.training)  # [bs, heads, seq, seq]
        att = (probs @ v).transpose(1, 2).flatten(2)  # [bs, seq, hidden]
        att = F.linear(att, self.mix.weight, self.mix.bias)
        # [bs, seq, hidden]
        probs = probs.flatten(0, 1)  # [bs * heads, seq, seq]
''',
'''        queries = self.W_query(x)  # [b, num_tokens, d_out]
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        values = self.W_value(x)  # [b, num_tokens, d_out]
        allowed = ~self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(queries, keys, values,
                                              attn_mask=allowed, dropout_p=p)
        # [b, num_tokens, d_out]
''',
None,
'''        split = (b, num_tokens, self.num_heads, self.head_dim)
        q = self.W_query(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        k = self.W_key(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        v = self.W_value(x).view(split).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=p)
        # [b, num_heads, num_tokens, head_dim]
        context = context.transpose(1, 2).reshape(b, num_tokens, -1)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
''',
None]
TEXT = fill(IMPORTS, B)
