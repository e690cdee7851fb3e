"""Crashes from a wrong size (``autograder/checks/diagnosis/crash.py``):
PyTorch's shape errors read, the wrong dimension of a view said only
when one alone fits, and a size named only when it follows the wrong
number on every failing case; the controls (a coincidence on one case,
an error of another kind) say no name. End to end:
kit/variants/diagnoses.toml's ``*_crash`` entries."""
from __future__ import annotations

from autograder.checks.diagnosis import crash
from autograder.values import load_cases

CASES = {c.name: c for c in load_cases()}


def test_a_view_names_the_one_dimension_that_fits():
    small = CASES["mha_small"]     # 4 heads of 3, 5 tokens, batch 2
    error = crash.parse("RuntimeError: shape '[2, 5, 4, 1]' is invalid "
                        "for input of size 120", crash.view_layouts(small))
    assert (error.form, error.wrong, error.wanted) == ("view", 1, 3)
    assert "[2, 5, 4, 3] fits, 3 in place of your 1 at dimension 3" in \
        error.text
    # Without the case's layouts every dimension could change: no claim.
    bare = crash.parse("shape '[2, 5, 4, 1]' is invalid for input of size "
                       "120")
    assert bare.wrong is None and "fits" not in bare.text


def test_a_matmul_and_a_broadcast_are_read():
    error = crash.parse("mat1 and mat2 shapes cannot be multiplied (10x9 "
                        "and 12x12)")
    assert (error.form, error.wrong, error.wanted) == ("matmul", 9, 12)
    error = crash.parse("The size of tensor a (4) must match the size of "
                        "tensor b (5) at non-singleton dimension 3")
    assert (error.form, error.wrong, error.wanted) == ("broadcast", 4, 5)
    assert crash.parse("expected a non-empty list of Tensors") is None
    assert crash.parse("shape '[" + "9" * 40 + "]' is invalid for input "
                       "of size 3") is None


def test_a_broadcasts_two_sizes_are_named_side_by_side_never_as_wrong():
    small, large = CASES["mha_small"], CASES["mha_large"]
    sizes = [crash.names(c) for c in (small, large)]
    found = [(c, crash.ShapeError("broadcast", "", n["head_dim"],
                                  n["seq_len"]))
             for c, n in zip((small, large), sizes)]
    wrong = crash.common_name(found, "wrong")
    wanted = crash.common_name(found, "wanted")
    assert (wrong, wanted) == ("head_dim", "seq_len")
    text = crash.sentence(small, 2, found[0][1], wrong, wanted,
                          "def f(x):\n    return x + x\n", 2)
    assert text.endswith(
        f"On each of the 2 failing cases, the {sizes[0]['head_dim']} "
        f"equals `head_dim` and the {sizes[0]['seq_len']} equals "
        f"`seq_len`.")
    assert "your" not in text.split("raised")[1]
    # One of the two unnamed: the other alone is said.
    assert crash.sentence(small, 2, found[0][1], wrong, "",
                          "def f(x):\n    return x\n", 2).endswith(
        f"the {sizes[0]['head_dim']} equals `head_dim`.")


def test_a_size_is_named_only_when_it_follows_the_number_on_every_case():
    small, large = CASES["mha_small"], CASES["mha_large"]
    one_head = CASES["mha_one_head"]

    def shaped(number):
        return crash.ShapeError("view", "", number, None)

    # d_in // num_heads on each case, as the number changes with it.
    found = [(c, shaped(crash.names(c)["d_in // num_heads"]))
             for c in (small, large, one_head)]
    assert crash.common_name(found, "wrong") == "d_in // num_heads"
    # One case: 9 is context_length there, by coincidence: not said.
    assert crash.names(small)["context_length"] == 9
    assert crash.common_name([(small, shaped(9))], "wrong") == ""
    # The same number on every case proves nothing either.
    assert crash.common_name([(small, shaped(9)), (small, shaped(9))],
                             "wrong") == ""
    # A number no size follows across the cases.
    assert crash.common_name([(small, shaped(9)), (large, shaped(5))],
                             "wrong") == ""


def _line_facts(code: str, form: str = "broadcast") -> list[str]:
    from autograder.checks.diagnosis import crash_facts
    source = f"import torch\n\n\ndef f(w, q, k):\n    {code}\n"
    return crash_facts.facts(source, 5, form)


def test_the_crashing_lines_own_operations_are_said():
    [fact] = _line_facts("w = w / w.sum(dim=-1)")
    assert fact.startswith("`w.sum(dim=-1)` drops the dimension it "
                           "reduces (no `keepdim=True`)")
    [fact] = _line_facts("s = q @ k.transpose(1, 2) / 8")
    assert fact.startswith("`k.transpose(1, 2)` swaps dimensions 1 and 2, "
                           "which are the last two only on a tensor of 3")
    assert _line_facts("s = torch.matmul(q, k.transpose(2, 1))",
                       "matmul")
    [fact] = _line_facts("s = q @ k.transpose(1, 3)")
    assert "swaps dimensions 1 and 3, which are not next to each other, " \
        "so never the last two" in fact
    # The dimension kept, the last two swapped, a reduction not in an
    # arithmetic operation, or another error: nothing to say.
    assert _line_facts("w = w / w.sum(dim=-1, keepdim=True)") == []
    assert _line_facts("w = w / w.sum()") == []
    assert _line_facts("s = q @ k.transpose(-2, -1)") == []
    assert _line_facts("s = q @ k.transpose(-1, -2)") == []
    assert _line_facts("t = torch.cat([w.sum(-1), q])") == []
    assert _line_facts("w = w / w.sum(dim=-1)", "view") == []


def test_a_failed_unpacking_of_a_split_says_what_split_takes():
    error = crash.parse("ValueError: too many values to unpack (expected 3)")
    assert (error.form, error.wrong, error.wanted) == ("unpack", None, 3)
    assert error.text == "the unpacking takes 3 values and was given more"
    assert crash.parse("not enough values to unpack (expected 3, got 2)"
                       ).text.endswith("was given 2")
    [fact] = _line_facts("q, k, v = y.split(C, dim=2)", "unpack")
    assert fact.startswith("`y.split(C, dim=2)` cuts pieces of `C` "
                           "positions each: `split`'s first number is the "
                           "size of each piece")
    assert _line_facts("q, k, v = torch.split(y, n, 2)", "unpack")
    source = "def f(y):\n    q, k, v = y.split(C, dim=2)\n"
    text = crash.sentence(CASES["sa_course"], 2, error, "", "", source, 1)
    assert "`q, k, v = y.split(C, dim=2)` raised: the unpacking takes 3 " \
        "values" in text and "shape error" not in text
    # Sizes listed, or no split: nothing to say.
    assert _line_facts("q, k, v = y.split([4, 4, 4], dim=2)", "unpack") \
        == []
    assert _line_facts("q, k, v = y.chunk(2, dim=2)", "unpack") == []


def test_a_product_of_two_dtypes_names_the_call_that_made_float64():
    for message in ("expected m1 and m2 to have the same dtype, but got: "
                    "double != float",
                    "expected scalar type Double but found Float",
                    "mat1 and mat2 must have the same dtype, but got Double "
                    "and Float"):
        error = crash.parse(message)
        assert error.form == "dtype" and error.text == \
            "its operands are double and float, and a product takes one dtype"
    source = ("def f(s, v):\n    p = s.softmax(-1, dtype=torch.float64)\n"
              "    return p @ v\n")
    text = crash.sentence(CASES["sa_course"], 3, error, "", "", source, 1)
    assert "`return p @ v` raised: its operands are double and float" in text
    assert text.endswith("Line 2 `s.softmax(-1, dtype=torch.float64)` makes "
                         "float64 (double) values, which meet float32 ones "
                         "here: cast them back (`.to(x.dtype)`) or leave the "
                         "float64 out.")
    # .double() and .to(torch.double) too; nothing that makes float64: no
    # word on a cause.
    for made in ("s.double()", "s.to(torch.double)"):
        assert "makes float64" in crash.sentence(
            CASES["sa_course"], 3, error, "", "",
            source.replace("s.softmax(-1, dtype=torch.float64)", made), 1)
    plain = source.replace(", dtype=torch.float64", "")
    assert crash.sentence(CASES["sa_course"], 3, error, "", "", plain,
                          1).endswith("a product takes one dtype.")


def test_a_boolean_mask_on_the_wrong_dimensions_says_where_it_lies():
    error = crash.parse("IndexError: The shape of the mask [5, 5] at index 0"
                        " does not match the shape of the indexed tensor "
                        "[3, 3, 5, 5] at index 1")
    assert error.form == "mask index"
    assert error.text == (
        "a boolean mask of shape [5, 5] is laid on the indexed [3, 3, 5, 5]"
        " tensor's dimensions from 1 on, whose sizes differ; its sizes are "
        "those of the last 2, which `t[..., mask]` indexes")
    # Sizes the last dimensions do not have: where it lies, no fix.
    other = crash.parse("The shape of the mask [4, 4] at index 0 does not "
                        "match the shape of the indexed tensor [3, 5, 5] at "
                        "index 0")
    assert other.text.endswith("from 0 on, whose sizes differ")


def test_a_contraction_and_a_stack_are_read_with_their_lines_cuts():
    error = crash.parse("RuntimeError: contracted dimensions need to match,"
                        " but first has size 7 in dim -1 and second has "
                        "size 9 in dim 0")
    assert (error.form, error.wrong, error.wanted) == ("contract", 7, 9)
    assert error.text == ("it pairs dimension -1 of its first operand (7) "
                          "with dimension 0 of its second (9)")
    [fact] = _line_facts("q = torch.tensordot(x, m.weight, dims=([-1], "
                         "[0]))", "contract")
    assert fact.startswith("`m.weight` is contracted over its dimension 0;"
                           " a linear layer's weight is stored "
                           "[out_features, in_features]")
    assert _line_facts("q = torch.tensordot(x, m.weight, dims=([-1], "
                       "[1]))", "contract") == []
    error = crash.parse("stack expects each tensor to be equal size, but "
                        "got [2, 2, 12] at entry 0 and [2, 1, 12] at entry 2")
    assert error.text == ("the tensors it stacks differ at dimension 1 (2 "
                          "at entry 0, 1 at entry 2)")
    [fact] = _line_facts("q = torch.stack(y.chunk(4, dim=1), dim=1)",
                         "stack")
    assert fact.startswith("`y.chunk(4, dim=1)` cuts pieces of unequal "
                           "sizes")
    assert _line_facts("q = torch.stack([y, y], dim=1)", "stack") == []


def test_an_expansion_is_read_and_the_folded_batch_named():
    message = ("RuntimeError: The expanded size of the tensor (8) must "
               "match the existing size (2) at non-singleton dimension 0.  "
               "Target sizes: [8, 5, 5].  Tensor sizes: [2, 5, 5]")
    error = crash.parse(message)
    assert (error.form, error.wrong, error.wanted) == ("expand", 2, 8)
    assert "a tensor of shape [2, 5, 5] is expanded (or broadcast) to " \
        "[8, 5, 5]: its 2 at dimension 0 is neither 1 nor 8" == error.text
    small = CASES["mha_small"]     # batch 2, 4 heads
    assert crash.names(small)["batch_size * num_heads"] == 8


def test_a_call_stopped_by_the_students_own_raise_says_its_length():
    import torch
    from autograder.sandbox.protocol import Probe
    book = CASES["ca_book"]
    probe = Probe("p", book.cls, dict(book.init), args=[torch.zeros(2, 6, 3)])
    error = crash.own_raise(probe)
    assert (error.form, error.wrong) == ("raise", 6)
    source = "def f(x):\n    raise ValueError('too long')\n"
    text = crash.sentence(book, 2, error, "", "", source, 1)
    assert text == ("- Where your code stops (public case `ca_book`): line 2"
                    " `raise ValueError('too long')`, your own `raise`, "
                    "stopped the call: its input has 6 positions along "
                    "dimension 1. On this case that length equals "
                    "`context_length` = 6.")
    # Under an inclusive test, the test is named with its line.
    guarded = ("def f(x):\n    if x.size(1) >= LIMIT:\n"
               "        raise ValueError('too long')\n")
    text = crash.sentence(book, 3, error, "", "", guarded, 1)
    assert text.endswith("equals `context_length` = 6; the test "
                         "`x.size(1) >= LIMIT` on line 2 refuses a value "
                         "equal to its bound as well (`>` refuses only past "
                         "it).")
    # A strict test, or a length no size equals: no word on the test.
    strict = guarded.replace(">=", ">")
    assert "refuses" not in crash.sentence(book, 3, error, "", "", strict, 1)
    odd = crash.own_raise(Probe("p", book.cls, dict(book.init),
                                args=[torch.zeros(2, 7, 3)]))
    assert crash.sentence(book, 3, odd, "", "", guarded, 1).endswith(
        "its input has 7 positions along dimension 1.")
    # The case's own length is never the name said for it.
    assert crash.common_name([(book, error)], "wrong") == ""
    assert crash.own_raise(Probe("p", book.cls, {}, args=[])) is None


VIEW_SOURCE = '''import torch


class A:
    def __init__(self, d_in, d_out, num_heads):
        self.num_heads = num_heads
        self.head_dim = d_in // num_heads

    def forward(self, x):
        b, t, _ = x.shape
        size = self.head_dim
        split = (b, t, self.num_heads, size)
        q = x.view(split).transpose(1, 2)
        k = x.view(b, t, self.num_heads, self.head_dim)
        v = x.view(b, t, self.num_heads, 3).view(b, t, -1, 3)
        return q
'''


def test_a_views_wrong_dimension_is_traced_to_what_sets_it():
    from autograder.checks.diagnosis import crash_facts
    [fact] = crash_facts.facts(VIEW_SOURCE, 13, "view", (3, 4))
    assert fact == ("dimension 3 of `x.view(split)` is `size` (line 12 "
                    "`split = (b, t, self.num_heads, size)`), set on line "
                    "11: `size = self.head_dim`, set on line 7: "
                    "`self.head_dim = d_in // num_heads`")
    [fact] = crash_facts.facts(VIEW_SOURCE, 14, "view", (3, 4))
    assert fact.endswith("is `self.head_dim`, set on line 7: "
                         "`self.head_dim = d_in // num_heads`")
    # A name bound by unpacking is not followed (which binding ran is
    # not read); two views of the rank on one line: which raised is a
    # guess; no dimension known: nothing.
    assert crash_facts.facts(VIEW_SOURCE, 14, "view", (1, 4)) == [
        "dimension 1 of `x.view(b, t, self.num_heads, self.head_dim)` is "
        "`t`"]
    assert crash_facts.facts(VIEW_SOURCE, 15, "view", (3, 4)) == []
    assert crash_facts.facts(VIEW_SOURCE, 13, "view") == []
    # An attribute set twice in the class: not followed.
    twice = VIEW_SOURCE.replace("        self.num_heads = num_heads\n",
                                "        self.head_dim = 1\n")
    [fact] = crash_facts.facts(twice, 14, "view", (3, 4))
    assert fact.endswith("is `self.head_dim`")
