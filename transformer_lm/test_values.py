"""The public frozen test values, for the tests and for your own checks.

``SelfAttentionTestValues`` and ``MultiHeadAttentionTestValues`` hold the
course-sized cases under the course's attribute names, for example::

    from transformer_lm.test_values import SelfAttentionTestValues as V
    attention = SelfAttention(input_size=7, hidden=9)
    attention.q.weight.data = V.q_weight  # and so on for every weight
    print((attention(V.x) - V.output).abs().max())

``BookExampleTestValues`` holds Part 3's example from the book: the six
tokens of "Your journey starts with one step" (3-d embeddings, stacked into
a batch of two) and the outputs of the modules built after
``torch.manual_seed(123)``.

``load_public_cases()`` returns every public case, read by the grader's
own loader (``autograder.values``): safetensors, which never executes code,
checked against the sha256 in ``test_values/manifest.json``.
"""
from __future__ import annotations

from pathlib import Path

from autograder.values import Case, load_cases


def load_public_cases(directory: Path | None = None) -> list[Case]:
    """Every public case, in manifest order (``case.name``, ``case.init``,
    ``case.tensors`` keyed ``"x"``, ``"q.weight"``, ..., ``"output"``).

    Raises autograder.values.ValuesError (a RuntimeError) if the values
    file does not match the manifest.
    """
    return load_cases(directory, sets=("public",))


_CASES = {case.name: case.tensors for case in load_public_cases()}
_SA = _CASES["sa_course"]
_MH = _CASES["mhsa_course"]
# mhsa_course_causal shares x and the weights; only the mask differs.
_MH_CAUSAL = _CASES["mhsa_course_causal"]


class SelfAttentionTestValues:
    """SelfAttention(input_size=7, hidden=9) on x of shape [3, 5, 7]."""

    x = _SA["x"]  # [3, 5, 7]
    q_weight = _SA["q.weight"]  # [9, 7]
    q_bias = _SA["q.bias"]  # [9]
    k_weight = _SA["k.weight"]  # [9, 7]
    k_bias = _SA["k.bias"]  # [9]
    v_weight = _SA["v.weight"]  # [9, 7]
    v_bias = _SA["v.bias"]  # [9]
    output = _SA["output"]  # [3, 5, 9]


class MultiHeadAttentionTestValues:
    """MultiHeadSelfAttention(input_size=7, hidden=9, num_heads=3) on x of
    shape [3, 5, 7]; ``output`` with causal=False, ``output_causal`` with
    causal=True. Unlike the 2022 course values, every bias has shape [9]."""

    x = _MH["x"]  # [3, 5, 7]
    q_weight = _MH["q.weight"]  # [9, 7]
    q_bias = _MH["q.bias"]  # [9]
    k_weight = _MH["k.weight"]  # [9, 7]
    k_bias = _MH["k.bias"]  # [9]
    v_weight = _MH["v.weight"]  # [9, 7]
    v_bias = _MH["v.bias"]  # [9]
    mix_weight = _MH["mix.weight"]  # [9, 9]
    mix_bias = _MH["mix.bias"]  # [9]
    output = _MH["output"]  # [3, 5, 9]
    output_causal = _MH_CAUSAL["output"]  # [3, 5, 9]
    attention = _MH["attention"]  # [3 * 3, 5, 5], probabilities
    attention_causal = _MH_CAUSAL["attention"]  # [3 * 3, 5, 5]


_CA_BOOK = _CASES["ca_book"]


class BookExampleTestValues:
    """Part 3: the book's example, modules built after
    ``torch.manual_seed(123)`` with d_in=3, d_out=2, context_length=6,
    dropout=0.0 (num_heads=2 for the two multi-head modules)."""

    inputs = _CA_BOOK["x"][0]  # [6, 3]: "Your journey starts with one step"
    batch = _CA_BOOK["x"]  # [2, 6, 3]: torch.stack((inputs, inputs))
    causal_attention = _CA_BOOK["output"]  # [2, 6, 2]
    wrapper = _CASES["mhw_book"]["output"]  # [2, 6, 2 * 2]
    multi_head_attention = _CASES["mha_book"]["output"]  # [2, 6, 2]
    gpt2_small_num_parameters = int(
        _CASES["gpt2_small"]["num_parameters"])  # 2,362,368
