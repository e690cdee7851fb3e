"""A transformer's feed-forward block, written from scratch.

The block is the second half of a pre-norm transformer layer (GPT-2's
MLP): LayerNorm, a Linear layer that widens each position's features,
GELU in its tanh form, a Linear layer back to the input size, and the
residual connection that adds the block's input to its output.

Fill in every block between ``# YOUR CODE STARTS HERE`` and
``# YOUR CODE ENDS HERE``. Do not rename the class, its arguments or the
attributes the docstrings name: the tests load frozen weights through them.

Every line that produces a tensor needs a comment with the tensor's shape,
for example ``# [batch_size, seq_len, hidden]``. Shape names you may use:
batch_size (bs, batch), seq_len (seq), input_size and hidden.
"""
import torch.nn as nn


class FeedForward(nn.Module):
    """Pre-norm feed-forward block with a residual connection.

    Args:
        input_size: size of each input vector (and of the output).
        hidden: size of the widened features between the two layers.
    """

    def __init__(self, input_size, hidden):
        super().__init__()
        # Task 1.1 (2 points): create the layers as attributes ``norm`` (an
        # nn.LayerNorm over input_size), ``up`` (an nn.Linear from
        # input_size to hidden) and ``down`` (an nn.Linear from hidden to
        # input_size), both with bias. Hint: ~3 lines.
        # YOUR CODE STARTS HERE
        self.norm = nn.LayerNorm(input_size)
        self.up = nn.Linear(input_size, hidden)
        self.down = nn.Linear(hidden, input_size)
        # YOUR CODE ENDS HERE

    def forward(self, x):
        """Apply the block to every position of ``x``.

        Args:
            x: float tensor of shape [batch_size, seq_len, input_size].

        Returns:
            Tensor of shape [batch_size, seq_len, input_size]:
            x + down(gelu_tanh(up(norm(x)))).
        """
        # Task 1.2 (3 points): normalise x, widen it, apply GELU in its
        # tanh form (nn.functional.gelu(h, approximate="tanh")), project
        # back and add the residual. Hint: ~3 lines.
        # YOUR CODE STARTS HERE
        h = self.up(self.norm(x))  # [bs, seq, hidden]
        h = nn.functional.gelu(h, approximate="tanh")  # [bs, seq, hidden]
        return x + self.down(h)  # [bs, seq, input_size]
        # YOUR CODE ENDS HERE
