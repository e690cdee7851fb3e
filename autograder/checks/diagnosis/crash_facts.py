"""What the expression on a line that raised a shape error does to its
operands' dimensions, read from the code: said after the crash's sizes,
and only facts of Python and PyTorch that hold whatever the values are.

- A reduction over a dimension (``w.sum(dim=-1)``) without
  ``keepdim=True``, used as an operand of ``+ - * /``: its result has one
  dimension fewer, and broadcasting lines dimensions up from the right.
- ``t.transpose(a, b)`` under a matrix product (``@``, ``matmul``) whose
  dimensions are not written as the last two: the product multiplies
  the last two dimensions and broadcasts the others.

- ``tensordot`` contracting a ``.weight`` over its dimension 0: a linear
  layer's weight is [out_features, in_features].
- A stack of pieces of different sizes after ``chunk`` / ``split``.
- A product of float64 and float32 operands: the call of the function
  that makes the float64 ones (``dtype=torch.float64``, ``.double()``).
- ``t.split(n)`` with one size, on a line whose unpacking failed: ``n``
  is each piece's size, not the number of pieces.
- A view whose one wrong dimension the crash's sizes show: the
  expression written there and, where it is a name or an attribute of
  ``self``, the one assignment that sets it (``self.head_dim = d_in //
  num_heads`` on the constructor's line), followed through plain names.
- A student's own ``raise`` under ``if a >= b`` (or ``b <= a``), said
  where the length it stopped equals a size of the case's constructor:
  the test refuses a length equal to its bound too.

The crash's own message says which sizes clash; these say which
operation on the line decides them, so the student sees the fix without
a guess about intent.
"""
from __future__ import annotations

import ast

from autograder.checks.diagnosis.code_facts import quote
from autograder.submission import regions

REDUCTIONS = ("sum", "mean", "amax", "amin", "logsumexp", "norm", "std",
              "var", "prod", "nansum", "nanmean")
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div)
PRODUCTS = ("matmul", "bmm")


def _statement(source: str, line: int) -> ast.stmt | None:
    """The simple statement holding ``line``."""
    spanning = [n for n in regions.nodes(source)
                if isinstance(n, ast.stmt) and not hasattr(n, "body")
                and n.lineno <= line <= (n.end_lineno or n.lineno)]
    # (a traceback names the line inside a statement written on several)
    return max(spanning, key=lambda n: n.lineno, default=None)


def _reduction(node: ast.AST) -> bool:
    """``t.sum(dim)`` or ``torch.sum(t, dim)`` with a dimension given and
    no ``keepdim`` (or ``keepdim=False``)."""
    if not (isinstance(node, ast.Call) and
            isinstance(node.func, ast.Attribute) and
            node.func.attr in REDUCTIONS):
        return False
    keep = next((k.value for k in node.keywords if k.arg == "keepdim"), None)
    if keep is not None and not (isinstance(keep, ast.Constant) and
                                 keep.value is False):
        return False
    function = isinstance(node.func.value, ast.Name) and \
        node.func.value.id == "torch"
    given = len(node.args) > (1 if function else 0) or any(
        k.arg == "dim" for k in node.keywords)
    return given and not any(isinstance(a, ast.Starred) for a in node.args)


def _dropped_dims(tree: ast.AST) -> list[str]:
    said = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and
                isinstance(node.op, ARITHMETIC)):
            continue
        for operand in (node.left, node.right):
            if _reduction(operand):
                said.append(
                    f"{quote(operand)} drops the dimension it reduces (no "
                    f"`keepdim=True`): its result has one dimension fewer, "
                    f"and broadcasting lines dimensions up from the right,"
                    f" so it does not sit beside what it was computed "
                    f"from; with `keepdim=True` that dimension stays, of "
                    f"size 1")
    return said


def _transposed(tree: ast.AST) -> list[str]:
    said = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call) and \
                isinstance(node.func, ast.Attribute) and \
                node.func.attr in PRODUCTS:
            operands = list(node.args)
        else:
            continue
        for operand in operands:
            dims = _transpose_dims(operand)
            if dims is None or dims in ((-2, -1), (-1, -2)):
                continue
            a, b = sorted(dims)
            text = (f"{quote(operand)} swaps dimensions {a} and {b}, which "
                    f"are ")
            if b == a + 1:
                text += (f"the last two only on a tensor of {b + 1} "
                         f"dimensions; a matrix product multiplies the last"
                         f" two and broadcasts the others (`transpose(-2, "
                         f"-1)` swaps the last two, whatever the number of "
                         f"dimensions)")
            else:
                text += ("not next to each other, so never the last two; a "
                         "matrix product multiplies the last two and "
                         "broadcasts the others, which must then match")
            said.append(text)
    return said


def _double(node: ast.AST) -> bool:
    """``torch.float64`` / ``torch.double`` (or the bare names)."""
    text = node.attr if isinstance(node, ast.Attribute) else \
        getattr(node, "id", "")
    return text in ("float64", "double")


def _doubles(source: str, line: int) -> list[str]:
    """The calls of the function holding ``line`` that make float64
    values (``dtype=torch.float64``, ``.double()``, ``.to(torch.double)``),
    on a line whose product met float64 and float32 operands."""
    functions = [n for n in regions.nodes(source)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not functions:
        return []
    said = []
    for node in ast.walk(max(functions, key=lambda f: f.lineno)):
        if not isinstance(node, ast.Call):
            continue
        method = node.func.attr if isinstance(node.func, ast.Attribute) \
            else ""
        if any(k.arg == "dtype" and _double(k.value) for k in node.keywords) \
                or method == "double" or method in ("to", "type") and any(
                    _double(a) for a in node.args):
            said.append(f"line {node.lineno} {quote(node)} makes float64 "
                        f"(double) values, which meet float32 ones here: "
                        f"cast them back (`.to(x.dtype)`) or leave the "
                        f"float64 out")
    return said[:1]


def _method_calls(tree: ast.AST, names: tuple[str, ...]
                  ) -> list[ast.Call]:
    """The calls ``<anything>.<name>(...)`` in ``tree``, ``name`` one of
    ``names``."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in names]


def _weight_rows(tree: ast.AST) -> list[str]:
    """``tensordot(x, m.weight, dims=([...], [0]))``: a weight contracted
    over its dimension 0, which a linear layer keeps for its outputs."""
    said = []
    for node in _method_calls(tree, ("tensordot",)):
        if len(node.args) < 2:
            continue
        dims = next((k.value for k in node.keywords if k.arg == "dims"),
                    node.args[2] if len(node.args) > 2 else None)
        if not (isinstance(dims, (ast.List, ast.Tuple)) and
                len(dims.elts) == 2):
            continue
        for operand, axes in zip(node.args[:2], dims.elts):
            if isinstance(operand, ast.Attribute) and \
                    operand.attr == "weight" and \
                    isinstance(axes, (ast.List, ast.Tuple)) and \
                    len(axes.elts) == 1 and \
                    isinstance(axes.elts[0], ast.Constant) and \
                    axes.elts[0].value == 0:
                said.append(f"{quote(operand)} is contracted over its "
                            f"dimension 0; a linear layer's weight is "
                            f"stored [out_features, in_features], and its "
                            f"dimension 1 meets the input's features "
                            f"(`x @ {ast.unparse(operand)}.T`)")
    return said


def _cut_dims(tree: ast.AST) -> list[str]:
    """``t.chunk(n, dim=d)`` / ``t.split(n, dim=d)`` on a line whose stack
    met pieces of different sizes."""
    return [f"{quote(node)} cuts pieces of unequal sizes wherever the "
            f"dimension it cuts is not a multiple of their number, as the "
            f"sizes above show: the dimension it cuts may not be the one "
            f"meant" for node in _method_calls(
                tree, ("chunk", "split", "tensor_split"))][:1]


def _split_sizes(tree: ast.AST) -> list[str]:
    """``t.split(n, ...)`` / ``torch.split(t, n, ...)`` with one size
    ``n`` (not a list of sizes), on a line whose unpacking failed."""
    said = []
    for node in _method_calls(tree, ("split",)):
        function = isinstance(node.func.value, ast.Name) and \
            node.func.value.id == "torch"
        sizes = node.args[1:2] if function else node.args[:1]
        size = sizes[0] if sizes else next(
            (k.value for k in node.keywords if k.arg == "split_size_or_"
             "sections"), None)
        if size is None or isinstance(size, (ast.List, ast.Tuple,
                                             ast.Starred)):
            continue
        said.append(f"{quote(node)} cuts pieces of {quote(size)} positions "
                    f"each: `split`'s first number is the size of each "
                    f"piece, not how many pieces (that is `chunk`'s)")
    return said


def _transpose_dims(node: ast.AST) -> tuple[int, int] | None:
    if not (isinstance(node, ast.Call) and
            isinstance(node.func, ast.Attribute) and
            node.func.attr in ("transpose", "swapaxes", "swapdims") and
            len(node.args) == 2 and not node.keywords):
        return None
    values = []
    for arg in node.args:
        if isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.USub) \
                and isinstance(arg.operand, ast.Constant):
            arg = ast.Constant(-arg.operand.value)
        if not (isinstance(arg, ast.Constant) and type(arg.value) is int):
            return None
        values.append(arg.value)
    a, b = values
    if a < 0 or b < 0:
        return (a, b) if {a, b} == {-2, -1} else None
    return a, b


def _enclosing(source: str, line: int, kind: type) -> ast.AST | None:
    """The innermost ``kind`` node (a function, a class) spanning ``line``."""
    spanning = [n for n in regions.nodes(source) if isinstance(n, kind)
                and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(spanning, key=lambda n: n.lineno, default=None)


def _set_by(source: str, line: int, expr: ast.expr) -> ast.Assign | None:
    """The assignment that gives ``expr`` (a name, in its function; an
    attribute ``self.<attr>``, in its class) when it is the only place
    the code binds it at all (no other assignment, unpacking, loop or
    augmented assignment: which one ran would be a guess), else None."""
    if isinstance(expr, ast.Name):
        scope = _enclosing(source, line, ast.FunctionDef)
    elif isinstance(expr, ast.Attribute) and \
            isinstance(expr.value, ast.Name) and expr.value.id == "self":
        scope = _enclosing(source, line, ast.ClassDef)
    else:
        return None
    if scope is None:
        return None
    target = ast.unparse(expr)
    stores = [n for n in ast.walk(scope)
              if isinstance(n, (ast.Name, ast.Attribute)) and
              isinstance(n.ctx, ast.Store) and ast.unparse(n) == target]
    assigns = [n for n in ast.walk(scope) if isinstance(n, ast.Assign)
               and len(n.targets) == 1 and n.targets[0] in stores]
    if len(stores) != 1 or len(assigns) != 1:
        return None
    return assigns[0]


def _view_dims(source: str, line: int, call: ast.Call
               ) -> tuple[list[ast.expr], ast.Assign | None] | None:
    """The sizes a ``view``/``reshape`` call asks for, one expression
    each, and the assignment of the tuple they were read from (a name
    given alone: ``view(split)``, ``view(*split)``)."""
    args = call.args[1:] if isinstance(call.func.value, ast.Name) and \
        call.func.value.id == "torch" else call.args
    if len(args) == 1:
        only = args[0].value if isinstance(args[0], ast.Starred) \
            else args[0]
        if isinstance(only, (ast.Tuple, ast.List)):
            args = only.elts
        elif isinstance(only, ast.Name):
            tuple_set = _set_by(source, line, only)
            if tuple_set is None or not isinstance(
                    tuple_set.value, (ast.Tuple, ast.List)):
                return None
            return list(tuple_set.value.elts), tuple_set
    if any(isinstance(a, ast.Starred) for a in args):
        return None
    return list(args), None


def _view_origin(source: str, line: int, tree: ast.AST,
                 place: tuple[int, int]) -> list[str]:
    """Where a view's wrong dimension ``place`` (index, rank) comes from:
    the expression at that index of the one view of that rank on the
    line, and the assignments that set it."""
    dim, rank = place
    views = [(call, found) for call in _method_calls(tree, ("view",
                                                            "reshape"))
             if (found := _view_dims(source, line, call)) is not None
             and len(found[0]) == rank]
    if len(views) != 1:
        return []     # no view, or several: which one raised is a guess
    call, (dims, tuple_set) = views[0]
    expr = dims[dim]
    text = f"dimension {dim} of {quote(call)} is {quote(expr)}"
    if tuple_set is not None:
        text += f" (line {tuple_set.lineno} {quote(tuple_set)})"
    seen = {id(tuple_set)}
    for _ in range(3):     # followed through plain names, a few hops
        assign = _set_by(source, line, expr)
        if assign is None or id(assign) in seen:
            break
        seen.add(id(assign))
        text += f", set on line {assign.lineno}: {quote(assign)}"
        expr = assign.value
    return [text]


def facts(source: str, line: int, form: str,
          place: tuple[int, int] | None = None) -> list[str]:
    """The sentences for the statement on ``line``, which raised a shape
    error of ``form`` (``crash.ShapeError.form``; ``place``: a view's
    wrong dimension and rank, when the sizes show it)."""
    if form == "dtype":
        return _doubles(source, line)
    node = _statement(source, line)
    if node is None:
        return []
    if form == "unpack":
        return _split_sizes(node)
    if form == "contract":
        return _weight_rows(node)
    if form == "stack":
        return _cut_dims(node)
    if form == "view":
        return _view_origin(source, line, node, place) if place else []
    said = _dropped_dims(node) if form == "broadcast" else []
    if form in ("broadcast", "matmul"):
        said += _transposed(node)
    return said


def inclusive_guard(source: str, line: int) -> str | None:
    """The ``if`` test right above the ``raise`` on ``line`` when it is
    one inclusive comparison (``a >= b``, ``b <= a``): the sentence that
    it refuses a value equal to its bound, or None."""
    for node in regions.nodes(source):
        if not isinstance(node, ast.If) or not any(
                isinstance(s, ast.Raise) and s.lineno == line
                for s in node.body):
            continue
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and \
                isinstance(test.ops[0], (ast.GtE, ast.LtE)):
            strict = ">" if isinstance(test.ops[0], ast.GtE) else "<"
            return (f"the test {quote(test)} on line {node.lineno} refuses "
                    f"a value equal to its bound as well (`{strict}` "
                    f"refuses only past it)")
    return None
