from gen import fill
IMPORTS = """import torch
import torch.nn as nn
"""
B = [None,
'''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        scores = torch.bmm(q, k.transpose(1, 2)) / (q.size(-1) ** 0.5)
        # [bs, seq, seq]
        return torch.bmm(torch.softmax(scores, dim=-1), v)  # [bs, seq, hidden]
''',
'''        h, hs = self.num_heads, self.head_size
        q = self.q(x).view(bs, seq, h, hs).transpose(1, 2).reshape(-1, seq, hs)
        # [bs * num_heads, seq, head_size]
        k = self.k(x).view(bs, seq, h, hs).transpose(1, 2).reshape(-1, seq, hs)
        # [bs * num_heads, seq, head_size]
        v = self.v(x).view(bs, seq, h, hs).transpose(1, 2).reshape(-1, seq, hs)
        # [bs * num_heads, seq, head_size]
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [bs * num_heads, seq, seq]
''',
'''            future = torch.ones(seq, seq, device=x.device).triu(1).bool()
            # [seq, seq]
            scores = scores.masked_fill(future, float("-inf"))
            # [bs * num_heads, seq, seq]
''',
'''        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [bs * num_heads, seq, seq]
        att = torch.bmm(probs, v)  # [bs * num_heads, seq, head_size]
        att = att.view(bs, h, seq, hs).transpose(1, 2).reshape(bs, seq, -1)
        # [bs, seq, hidden]
        att = self.mix(att)  # [bs, seq, hidden]
''',
'''        queries = self.W_query(x)  # [b, num_tokens, d_out]
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        values = self.W_value(x)  # [b, num_tokens, d_out]
        attn_scores = torch.bmm(queries, keys.transpose(1, 2))
        # [b, num_tokens, num_tokens]
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.d_out ** 0.5, dim=-1)
        # [b, num_tokens, num_tokens]
        attn_weights = self.dropout(attn_weights)
        # [b, num_tokens, num_tokens]
        return torch.bmm(attn_weights, values)  # [b, num_tokens, d_out]
''',
None,
'''        h, hd = self.num_heads, self.head_dim
        queries = self.W_query(x).view(b, num_tokens, h, hd).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        keys = self.W_key(x).view(b, num_tokens, h, hd).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        values = self.W_value(x).view(b, num_tokens, h, hd).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        queries = queries.reshape(b * h, num_tokens, hd)
        # [b * num_heads, num_tokens, head_dim]
        keys = keys.reshape(b * h, num_tokens, hd)
        # [b * num_heads, num_tokens, head_dim]
        values = values.reshape(b * h, num_tokens, hd)
        # [b * num_heads, num_tokens, head_dim]
        attn_scores = torch.bmm(queries, keys.transpose(1, 2)) / hd ** 0.5
        # [b * num_heads, num_tokens, num_tokens]
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        # [num_tokens, num_tokens]
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
        # [b * num_heads, num_tokens, num_tokens]
        attn_weights = self.dropout(torch.softmax(attn_scores, dim=-1))
        # [b * num_heads, num_tokens, num_tokens]
        context = torch.bmm(attn_weights, values)
        # [b * num_heads, num_tokens, head_dim]
        context = context.view(b, h, num_tokens, hd).transpose(1, 2)
        # [b, num_tokens, num_heads, head_dim]
        context = context.reshape(b, num_tokens, self.d_out)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
''',
None]
TEXT = fill(IMPORTS, B)
