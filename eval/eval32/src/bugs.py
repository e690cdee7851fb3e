BUGS = [
("s01_einsum_scale_after_softmax", "a", [(
'''        w = einsum(q, k, "b i d, b j d -> b i j") / q.shape[-1] ** 0.5
        # [bs, seq, seq]
        return einsum(w.softmax(dim=-1), v, "b i j, b j d -> b i d")
''',
'''        w = einsum(q, k, "b i d, b j d -> b i j")  # [bs, seq, seq]
        w = w.softmax(dim=-1) / q.shape[-1] ** 0.5  # [bs, seq, seq]
        return einsum(w, v, "b i j, b j d -> b i d")
''')]),
("s02_einsum_mask_int_dtype", "a", [(
'''            keep = torch.tril(torch.ones(seq, seq, device=x.device)) > 0
            # [seq, seq]
            scores = scores.masked_fill(~keep, float("-inf"))
''',
'''            keep = torch.ones(seq, seq, dtype=torch.int,
                              device=x.device).tril()  # [seq, seq]
            scores = scores.masked_fill((~keep).bool(), float("-inf"))
''')]),
("s03_loops_values_strided", "b", [(
"v_h = v[:, :, lo:lo + self.head_size]", "v_h = v[:, :, h::self.num_heads]")]),
("s04_loops_ca_dropout_before_softmax", "b", [(
'''        attn_weights = torch.softmax(attn_scores / math.sqrt(self.d_out),
                                     dim=-1)  # [b, num_tokens, num_tokens]
        attn_weights = self.dropout(attn_weights)
        # [b, num_tokens, num_tokens]
''',
'''        attn_scores = self.dropout(attn_scores)  # [b, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / math.sqrt(self.d_out),
                                     dim=-1)  # [b, num_tokens, num_tokens]
''')]),
("s05_loops_mha_range_off_by_one", "b", [(
"        for h in range(self.num_heads):\n            sl = slice(",
"        for h in range(self.num_heads - 1):\n            sl = slice(")]),
("s06_helpers_probs_heads_major", "c", [(
"probs = probs.reshape(-1, seq, seq)  # [bs * heads, seq, seq]",
"probs = probs.transpose(0, 1).reshape(-1, seq, seq)\n        # [bs * heads, seq, seq]")]),
("s07_helpers_sa_value_bias_dropped", "c", [(
"        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]",
"        q, k, v = self.q(x), self.k(x), x @ self.v.weight.T\n        # [bs, seq, hidden]")]),
("s08_helpers_ca_mask_wrong_corner", "c", [(
'''        values: Tensor = self.W_value(x)  # [b, num_tokens, d_out]
        hide = self.mask.bool()[:num_tokens, :num_tokens]''',
'''        values: Tensor = self.W_value(x)  # [b, num_tokens, d_out]
        hide = self.mask.bool()[:num_tokens, -num_tokens:]''')]),
("s09_bmm_unfold_heads_batch_order", "d", [(
"att = att.view(bs, h, seq, hs).transpose(1, 2).reshape(bs, seq, -1)",
"att = att.view(h, bs, seq, hs).permute(1, 2, 0, 3).reshape(bs, seq, -1)")]),
("s10_bmm_ca_weights_transposed", "d", [(
"return torch.bmm(attn_weights, values)  # [b, num_tokens, d_out]",
"return torch.bmm(attn_weights.transpose(1, 2), values)\n        # [b, num_tokens, d_out]")]),
("s11_sdpa_ca_mask_semantics_inverted", "e", [(
"allowed = ~self.mask.bool()[:num_tokens, :num_tokens]",
"allowed = self.mask.bool()[:num_tokens, :num_tokens]")]),
("s12_sdpa_mha_scale_passed_as_divisor", "e", [(
'''        p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=p)''',
'''        p = self.dropout.p if self.training else 0.0
        scale = self.head_dim ** 0.5
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=p, scale=scale)''')]),
("s13_bmm_mha_scale_by_num_tokens", "d", [(
"attn_scores = torch.bmm(queries, keys.transpose(1, 2)) / hd ** 0.5",
"attn_scores = torch.bmm(queries, keys.transpose(1, 2))\n        attn_scores = attn_scores / keys.size(1) ** 0.5")]),
("d01_einsum_ca_keys_from_values_probs_hb", "a", [
("        k = self.W_key(x)  # [b, num_tokens, d_out]",
 "        k = self.W_value(x)  # [b, num_tokens, d_out]"),
('"b h i j -> (b h) i j"', '"b h i j -> (h b) i j"')]),
("d02_loops_scores_kq_wrapper_reversed", "b", [
("s_h = torch.matmul(q_h, k_h.transpose(-2, -1))",
 "s_h = torch.matmul(k_h, q_h.transpose(-2, -1))"),
("        for head in self.heads:", "        for head in reversed(self.heads):")]),
("d03_sdpa_sa_causal_mhsa_scaled_twice", "e", [
("return F.scaled_dot_product_attention(q, k, v)  # [bs, seq, hidden]",
 "return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n        # [bs, seq, hidden]"),
("        probs = F.dropout(F.softmax(scores, dim=-1), p=self.dropout.p,\n                          training=self.training)",
 "        probs = F.softmax(scores / self.scale, dim=-1)  # [bs, heads, seq, seq]\n        probs = F.dropout(probs, p=self.dropout.p,\n                          training=self.training)")]),
]
