"""Hostile test submission: sys.exit(0) while being imported.

A correct, compact implementation plus the hostile part.
Used by kit_tests/test_sandbox.py; never graded for real.
"""
import torch
import torch.nn as nn
import sys
sys.exit(0)


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        probs = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1)
        return probs @ v


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False,
                 dropout=0):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.causal = causal

    def forward(self, x, return_attention=False):
        bs, seq, _ = x.shape
        split = (bs, seq, self.num_heads, self.head_size)
        q, k, v = (lin(x).view(split).transpose(1, 2)
                   for lin in (self.q, self.k, self.v))
        scores = q @ k.transpose(2, 3) / self.head_size ** 0.5
        if self.causal:
            future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        probs = self.dropout(scores.softmax(dim=-1))
        att = (probs @ v).transpose(1, 2).reshape(bs, seq, -1)
        att = self.mix(att)
        probs = probs.reshape(bs * self.num_heads, seq, seq)
        if return_attention:
            return att, probs
        return att
