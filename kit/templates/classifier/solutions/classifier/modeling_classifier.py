"""Layer normalisation and a softmax classifier, written from scratch.

``Norm`` normalises each position's features to mean 0 and variance 1,
then scales and shifts them by its learned ``weight`` and ``bias``.
``Classifier`` maps each position's features to one score per class and
returns the log-probabilities of the classes: the inputs of a
cross-entropy loss, which is minus the log-probability of the right class.

Fill in every block between ``# YOUR CODE STARTS HERE`` and
``# YOUR CODE ENDS HERE``. Do not rename the classes, their arguments or
their parameters: the tests load frozen weights into them by name.

Every line that produces a tensor needs a comment with the tensor's shape,
for example ``# [batch_size, seq_len, num_classes]``. Shape names you may
use: batch_size (bs, batch), seq_len (seq), input_size and num_classes.
"""
import torch
import torch.nn as nn


class Norm(nn.Module):
    """Layer normalisation over the last dimension.

    Args:
        input_size: size of each input vector (and of the output).
        eps: added to the variance before its square root.
    """

    def __init__(self, input_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(input_size))
        self.bias = nn.Parameter(torch.zeros(input_size))

    def forward(self, x):
        """Normalise every position of ``x``.

        Args:
            x: float tensor of shape [batch_size, seq_len, input_size].

        Returns:
            Tensor of the same shape: (x - mean) / sqrt(var + eps) over the
            last dimension (the biased variance), times ``weight``, plus
            ``bias``.
        """
        # Task 1.1 (2 points): the mean and the biased variance over the
        # last dimension, then normalise, scale and shift. Hint: ~4 lines.
        # YOUR CODE STARTS HERE
        mean = x.mean(-1, keepdim=True)  # [bs, seq, 1]
        var = x.var(-1, keepdim=True, unbiased=False)  # [bs, seq, 1]
        normed = (x - mean) / (var + self.eps).sqrt()  # [bs, seq, input_size]
        return normed * self.weight + self.bias  # [bs, seq, input_size]
        # YOUR CODE ENDS HERE


class Classifier(nn.Module):
    """A linear softmax classifier of every position.

    Args:
        input_size: size of each input vector.
        num_classes: number of classes.
    """

    def __init__(self, input_size, num_classes):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_classes, input_size))
        self.bias = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x):
        """The log-probabilities of the classes at every position.

        Args:
            x: float tensor of shape [batch_size, seq_len, input_size].

        Returns:
            Tensor of shape [batch_size, seq_len, num_classes]: the log of
            the softmax over the classes of x @ weight.T + bias.
        """
        # Task 2.1 (3 points): the scores of the classes, their softmax
        # over the classes, and its log. Hint: ~3 lines.
        # YOUR CODE STARTS HERE
        scores = x @ self.weight.T + self.bias  # [bs, seq, num_classes]
        probs = torch.softmax(scores, dim=-1)  # [bs, seq, num_classes]
        return torch.log(probs)  # [bs, seq, num_classes]
        # YOUR CODE ENDS HERE
