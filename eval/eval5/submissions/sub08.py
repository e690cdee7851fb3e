"""Self-attention and multi-head self-attention, written from scratch.

Parts 1 and 2 build the course's SelfAttention and MultiHeadSelfAttention;
Part 3 follows chapter 3 of Raschka's "Build a Large Language Model from
Scratch": causal heads, stacked, then fused, then sized like GPT-2.

Fill in every block between ``# YOUR CODE STARTS HERE`` and
``# YOUR CODE ENDS HERE``. Do not rename the classes, their arguments or the
attributes the docstrings name: the tests load frozen weights through them.

Every line that produces a tensor needs a comment with the tensor's shape,
for example ``# [batch_size, seq_len, hidden]``. Shape names you may use:
batch_size (bs, batch), seq_len (seq), input_size, hidden, num_heads (heads),
head_size (head_dim), and products such as ``bs * num_heads``; Part 3's
names b, num_tokens, d_in, d_out and head_dim work too.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention.

    Args:
        input_size: size of each input vector.
        hidden: size of the queries, keys, values and of the output.
    """

    def __init__(self, input_size, hidden):
        super().__init__()
        # Task 1.1 (1 point): create the query, key and value projections
        # as attributes ``q``, ``k`` and ``v``: each an nn.Linear from
        # input_size to hidden, with bias. Hint: ~3 lines.
        # YOUR CODE STARTS HERE
        self.q, self.k, self.v = (nn.Linear(input_size, hidden)
                                  for _ in range(3))
        # YOUR CODE ENDS HERE

    def forward(self, x):
        """Attend every position of ``x`` to every other position.

        Args:
            x: float tensor of shape [batch_size, seq_len, input_size].

        Returns:
            Tensor of shape [batch_size, seq_len, hidden]:
            softmax(q k^T / sqrt(hidden)) v.
        """
        # Task 1.2 (3 points, +1 bonus for at most three statements):
        # project x to queries, keys and values, compute the scaled
        # attention probabilities and return their weighted sum of the
        # values. Hint: ~3 lines.
        # YOUR CODE STARTS HERE
        q = self.q(x)  # [bs, seq, hidden]
        scores = q @ self.k(x).permute(0, 2, 1) / q.size(-1) ** 0.5
        # [bs, seq, seq]
        return F.softmax(scores, dim=2) @ self.v(x)  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout.

    Args:
        input_size: size of each input vector.
        hidden: total size of the queries, keys and values of all heads,
            and of the output; must be divisible by ``num_heads``.
        num_heads: number of attention heads.
        causal: if True, a position attends only to itself and to earlier
            positions.
        dropout: dropout probability applied to the attention
            probabilities.
    """

    def __init__(self, input_size, hidden, num_heads, causal=False,
                 dropout=0):
        super().__init__()
        if hidden % num_heads:
            raise ValueError(
                f"hidden ({hidden}) must be divisible by num_heads "
                f"({num_heads}): every head gets hidden // num_heads "
                f"dimensions"
            )
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal

    def forward(self, x, return_attention=False):
        """Multi-head attention of ``x`` to itself.

        Args:
            x: float tensor of shape [batch_size, seq_len, input_size].
            return_attention: if True, also return the attention
                probabilities (after dropout).

        Returns:
            ``att`` of shape [batch_size, seq_len, hidden], and with
            ``return_attention=True`` the tuple ``(att, probs)`` where
            ``probs`` has shape [batch_size * num_heads, seq_len, seq_len]
            with the heads of one batch element next to each other.
        """
        bs, seq, _ = x.shape
        # Task 2.1 (3 points): project x to queries, keys and values,
        # split each into num_heads heads of head_size and compute the
        # scaled attention scores of every head. Hint: ~5 lines.
        # YOUR CODE STARTS HERE
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
        # YOUR CODE ENDS HERE
        if self.causal:
            # Task 2.2 (1 point): hide strictly future positions from
            # every query (a position may attend to itself).
            # Hint: ~2 lines.
            # YOUR CODE STARTS HERE
            upper = torch.triu(torch.ones(seq, seq), 1).to(torch.bool)
            # [seq, seq]
            scores = scores.masked_fill(upper, -1e9)
            # [bs, num_heads, seq, seq]
            # YOUR CODE ENDS HERE
        # Task 2.3 (2 points): turn the scores into probabilities, apply
        # dropout to them, take the weighted sum of the values, merge the
        # heads and mix them with ``self.mix``. Leave ``probs`` as
        # [batch_size * num_heads, seq_len, seq_len]. Hint: ~5 lines.
        # YOUR CODE STARTS HERE
        probs = F.softmax(scores, dim=-1)  # [bs, num_heads, seq, seq]
        probs = F.dropout(probs, p=self.dropout.p, training=self.training)
        # [bs, num_heads, seq, seq]
        att = (probs @ v).permute(0, 2, 1, 3).contiguous()
        # [bs, seq, num_heads, head_size]
        att = self.mix(att.view(bs, seq, self.num_heads * self.head_size))
        # [bs, seq, hidden]
        probs = probs.reshape(bs * self.num_heads, seq, seq)
        # [bs * num_heads, seq, seq]
        # YOUR CODE ENDS HERE
        if return_attention:
            return att, probs
        return att


# Part 3: from stacked heads to fused heads. Layers are created in the order
# the docstrings give, so that a fixed seed reproduces the book's numbers.


class CausalAttention(nn.Module):
    """One causal attention head with dropout on the attention weights.

    Args:
        d_in: size of each input vector.
        d_out: size of the queries, keys, values and of the output.
        context_length: longest sequence the causal mask covers.
        dropout: dropout probability on the attention weights.
        qkv_bias: whether the projections have a bias.
    """

    def __init__(self, d_in, d_out, context_length, dropout,
                 qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x):
        """Causal self-attention of ``x`` [b, num_tokens, d_in].

        Returns:
            Context vectors of shape [b, num_tokens, d_out].
        """
        b, num_tokens, d_in = x.shape
        # Task 3.1 (2 points): compute the queries, keys and values, the
        # attention scores with the future masked (cut self.mask to
        # num_tokens), the softmax of the scores scaled by the square root
        # of the key size, dropout on these weights, and the weighted sum
        # of the values. Hint: ~8 lines.
        # YOUR CODE STARTS HERE
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
        # YOUR CODE ENDS HERE


class MultiHeadAttentionWrapper(nn.Module):
    """Multi-head attention as a stack of independent causal heads.

    Args:
        d_in, d_out, context_length, dropout, qkv_bias: as CausalAttention,
            for every head.
        num_heads: number of heads; the output has num_heads * d_out
            features.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList([
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        ])

    def forward(self, x):
        """Run every head on ``x`` [b, num_tokens, d_in].

        Returns:
            The heads' outputs concatenated along the last dimension:
            [b, num_tokens, num_heads * d_out].
        """
        # Task 3.2 (1 point): run every head and concatenate their
        # outputs. Hint: ~1 line.
        # YOUR CODE STARTS HERE
        outs = list(map(lambda head: head(x), self.heads))
        return torch.cat(outs, dim=-1)  # [b, num_tokens, num_heads * d_out]
        # YOUR CODE ENDS HERE


class MultiHeadAttention(nn.Module):
    """Fused multi-head causal attention: one projection, split by heads.

    Args:
        d_in: size of each input vector.
        d_out: output size, split into num_heads heads of d_out // num_heads.
        context_length: longest sequence the causal mask covers.
        dropout: dropout probability on the attention weights.
        num_heads: number of heads; must divide d_out.
        qkv_bias: whether the query, key and value projections have a bias.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(
                f"d_out ({d_out}) must be divisible by num_heads "
                f"({num_heads})"
            )
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x):
        """Causal multi-head attention of ``x`` [b, num_tokens, d_in].

        Returns:
            Tensor of shape [b, num_tokens, d_out].
        """
        b, num_tokens, d_in = x.shape
        if num_tokens > self.context_length:
            raise ValueError(
                f"input has {num_tokens} tokens but this attention was "
                f"built for a context of at most {self.context_length}"
            )
        # Task 3.3 (2 points): project once, split the projections into
        # heads with view and transpose, attend causally per head (scale
        # by sqrt(head_dim), dropout on the weights), merge the heads and
        # apply out_proj. Hint: ~10 lines.
        # YOUR CODE STARTS HERE
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
        # YOUR CODE ENDS HERE


def gpt2_small_attention():
    """The attention layer of the smallest GPT-2 (124M).

    Returns:
        A MultiHeadAttention with 768 inputs and outputs, 12 heads, a
        context of 1024 tokens, dropout 0.1 and query/key/value biases.
    """
    # Task 3.4 (1 point): return the GPT-2 small attention layer the
    # docstring describes. Hint: ~1 line.
    # YOUR CODE STARTS HERE
    return MultiHeadAttention(d_in=768, d_out=768, context_length=1024,
                              dropout=0.1, num_heads=12, qkv_bias=True)
    # YOUR CODE ENDS HERE
