# Example submission for `make demo`: squeezes the output, which passes
# the public cases but breaks on a batch of one (hidden cases only).
"""Self-attention and multi-head self-attention, written from scratch.

Fill in every block between ``# YOUR CODE STARTS HERE`` and
``# YOUR CODE ENDS HERE``. Do not rename the classes, their arguments or the
attributes the docstrings name: the tests load frozen weights through them.

Every line that produces a tensor needs a comment with the tensor's shape,
for example ``# [batch_size, seq_len, hidden]``. Shape names you may use:
batch_size (bs, batch), seq_len (seq), input_size, hidden, num_heads (heads),
head_size (head_dim), and products such as ``bs * num_heads``.
"""
import torch
import torch.nn as nn


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
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
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
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(
            q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1
        )  # [bs, seq, seq]
        return (probs @ v).squeeze()  # [bs, seq, hidden]
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
        split = (bs, seq, self.num_heads, self.head_size)
        q = self.q(x).view(split).transpose(1, 2)  # [bs, heads, seq, head]
        k = self.k(x).view(split).transpose(1, 2)  # [bs, heads, seq, head]
        v = self.v(x).view(split).transpose(1, 2)  # [bs, heads, seq, head]
        scores = q @ k.transpose(2, 3) / self.scale
        # [bs, num_heads, seq, seq]
        # YOUR CODE ENDS HERE
        if self.causal:
            # Task 2.2 (1 point): hide strictly future positions from
            # every query (a position may attend to itself).
            # Hint: ~2 lines.
            # YOUR CODE STARTS HERE
            future = torch.ones(seq, seq, device=x.device).triu(1).bool()
            # [seq, seq]
            scores = scores.masked_fill(future, float("-inf"))
            # [bs, num_heads, seq, seq]
            # YOUR CODE ENDS HERE
        # Task 2.3 (2 points): turn the scores into probabilities, apply
        # dropout to them, take the weighted sum of the values, merge the
        # heads and mix them with ``self.mix``. Leave ``probs`` as
        # [batch_size * num_heads, seq_len, seq_len]. Hint: ~5 lines.
        # YOUR CODE STARTS HERE
        probs = self.dropout(scores.softmax(dim=-1))
        # [bs, num_heads, seq, seq]
        att = probs @ v  # [bs, heads, seq, head_size]
        att = att.transpose(1, 2).reshape(bs, seq, -1)  # [bs, seq, hidden]
        att = self.mix(att)  # [bs, seq, hidden]
        probs = probs.reshape(bs * self.num_heads, seq, seq)
        # [bs * num_heads, seq, seq]
        # YOUR CODE ENDS HERE
        if return_attention:
            return att, probs
        return att
