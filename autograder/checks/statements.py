"""Count the statements that run for a method (for the "at most N
statements" bonus): the method's own and those of every function of the
submission it runs, so that a one-statement ``forward`` calling a
six-statement helper counts seven."""
from __future__ import annotations

import ast
from collections.abc import Iterable

from autograder.submission import regions

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _classes(tree: ast.AST) -> dict[str, ast.ClassDef]:
    """The module's classes by name, wherever block statements indent
    them (a class under ``if True:`` is still the class Python defines);
    the last of a name wins, as in the module Python builds."""
    return {node.name: node for node in regions.flatten(tree.body)
            if isinstance(node, ast.ClassDef)}


def _methods(node: ast.ClassDef) -> dict[str, ast.AST]:
    # The last definition of a name is the one the class keeps.
    return {item.name: item for item in regions.flatten(node.body)
            if isinstance(item, _FUNCS)}


def _method(tree: ast.AST, cls: str, method: str
            ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    node = _classes(tree).get(cls)
    return _methods(node).get(method) if node is not None else None


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and \
        isinstance(node.value, ast.Constant) and \
        isinstance(node.value.value, str)


def _count(func: ast.AST) -> int:
    """Statements of ``func``'s body, recursively, docstring aside."""
    body = func.body
    if body and _is_docstring(body[0]):
        body = body[1:]
    # ast.walk visits every nested node; only statements are counted (an
    # except handler or match case is not a statement, its body is).
    return sum(isinstance(node, ast.stmt)
               for stmt in body for node in ast.walk(stmt))


def _bases(tree: ast.AST, cls: ast.ClassDef) -> list[ast.ClassDef]:
    """``cls`` and its bases defined in the module, nearest first."""
    classes, found, queue = _classes(tree), [], [cls]
    while queue:
        node = queue.pop(0)
        if node in found:
            continue
        found.append(node)
        queue += [classes[b.id] for b in node.bases
                  if isinstance(b, ast.Name) and b.id in classes]
    return found


def _callees(tree: ast.AST, func: ast.AST, owner: ast.ClassDef | None
             ) -> list[ast.AST]:
    """The functions of the module ``func`` calls by name:
    ``name(...)`` (a module-level function), ``self.name(...)`` and
    ``super().name(...)`` (a method of ``owner`` or its bases in the
    module), ``Class.name(...)`` (a method of a class of the module or
    of its bases)."""
    module = {n.name: n for n in regions.flatten(tree.body)
              if isinstance(n, _FUNCS)}
    classes = _classes(tree)
    lineage = _bases(tree, owner) if owner is not None else []
    found = []
    for call in ast.walk(func):
        if not isinstance(call, ast.Call):
            continue
        target = call.func
        if isinstance(target, ast.Name) and target.id in module:
            found.append(module[target.id])
        elif isinstance(target, ast.Attribute):
            base = target.value
            if isinstance(base, ast.Name) and base.id == "self" or \
                    isinstance(base, ast.Call) and \
                    isinstance(base.func, ast.Name) and \
                    base.func.id == "super":
                found += [m for c in lineage
                          for name, m in _methods(c).items()
                          if name == target.attr][:1]
            elif isinstance(base, ast.Name) and base.id in classes:
                found += [m for c in _bases(tree, classes[base.id])
                          for name, m in _methods(c).items()
                          if name == target.attr][:1]
    return found


def count_statements(source: str, cls: str, method: str,
                     ran: Iterable[int] = (), *,
                     helpers: bool = True) -> int | None:
    """The number of statements that run for ``cls.method``: its body's,
    counted recursively (a compound statement (``if``, ``for``, ``with``,
    ...) counts itself plus every statement inside it), plus those of
    every function of the submission it calls by name, transitively,
    and of every function whose ``def`` line is in ``ran`` (what ran
    while the task's traced calls ran: a helper called through a dict
    or ``getattr``), constructors aside. Each function counts once; the
    docstrings do not count; a statement spread over several lines
    counts once. ``cls`` is found at any depth of the module.
    ``helpers=False``: the method's own statements only.

    Returns None if the source does not parse or the method is missing.
    """
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None     # the module does not import either
    func = _method(tree, cls, method)
    if func is None:
        return None
    if not helpers:
        return _count(func)
    owners = {id(m): c for c in _classes(tree).values()
              for m in _methods(c).values()}
    ran = set(ran)
    seen: dict[int, ast.AST] = {id(func): func}
    queue = [func]
    queue += [n for n in ast.walk(tree) if isinstance(n, _FUNCS) and
              n.lineno in ran and n.name != "__init__" and id(n) not in seen]
    seen.update((id(n), n) for n in queue)
    while queue:
        current = queue.pop(0)
        for callee in _callees(tree, current, owners.get(id(current))):
            if id(callee) not in seen:
                seen[id(callee)] = callee
                queue.append(callee)
    # A function nested in a counted one is counted with it already.
    nested = {id(n) for f in seen.values() for n in ast.walk(f)
              if n is not f and isinstance(n, _FUNCS)}
    return sum(_count(f) for key, f in seen.items() if key not in nested)
