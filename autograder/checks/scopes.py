"""Which binding a name of the parsed module refers to, as Python's own
scoping rules decide it: a local variable called ``compile`` is not the
built-in ``compile``, a name bound in an enclosing function is a closure,
and a module-level binding hides a built-in only where it surely ran
first. The static rules ask this instead of matching names as text.

Iterative (no recursion), so a deeply nested module costs no stack.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Statements whose bindings are made unconditionally when a module (or
# class) body runs them: a block statement's bindings may never happen.
_DIRECT = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import,
           ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
           ast.ClassDef, ast.Expr)


@dataclass(eq=False)
class Scope:
    """A module, class or function (lambda, comprehension) scope."""

    kind: str                     # "module", "class" or "function"
    parent: Scope | None
    bound: set[str] = field(default_factory=set)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)
    # name -> indices (in this module's or class's body) of the statements
    # that bind it unconditionally; names deleted anywhere in the scope.
    direct: dict[str, list[int]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    # name -> what binds it: the value of ``name = value``, ("aug", node)
    # for ``name += value``, ("for", iterable) for a loop target, None for
    # any other binding (a parameter, an import, ...).
    values: dict[str, list] = field(default_factory=dict)


@dataclass(frozen=True)
class _Use:
    scope: Scope
    module_index: int      # the module body's statement holding the use
    class_index: int       # the class body's, when used directly in one


class Scopes:
    """The scopes of one parsed module and where each name is used."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = Scope("module", None)
        self._uses: dict[int, _Use] = {}
        self._walk(tree)

    # ------------------------------------------------------------------
    def _bind(self, scope: Scope, name: str, value, direct: int | None,
              delete: bool = False) -> None:
        target = scope
        if name in scope.declared_global:
            target, direct = self.module, None
        target.bound.add(name)
        if delete:
            target.deleted.add(name)
        elif direct is not None:
            target.direct.setdefault(name, []).append(direct)
        target.values.setdefault(name, []).append(value)

    def _walk(self, tree: ast.Module) -> None:
        # (node, scope, module index, class index, direct index): the
        # direct index is the body index of the module or class statement
        # holding the node while its bindings are unconditional, else None.
        stack: list[tuple] = [(stmt, self.module, i, -1,
                               i if isinstance(stmt, _DIRECT) else None)
                              for i, stmt in enumerate(tree.body)]
        while stack:
            node, scope, mi, ci, direct = stack.pop()
            self._visit(node, scope, mi, ci, direct, stack)

    def _visit(self, node, scope, mi, ci, direct, stack) -> None:
        push = stack.append
        if isinstance(node, (*_FUNCS, ast.Lambda)):
            self._function(node, scope, mi, ci, direct, push)
            return
        if isinstance(node, ast.ClassDef):
            self._bind(scope, node.name, None, direct)
            for sub in [*node.decorator_list, *node.bases, *node.keywords]:
                push((sub, scope, mi, ci, None))
            inner = Scope("class", scope)
            for i, sub in enumerate(node.body):
                push((sub, inner, mi, i,
                      i if isinstance(sub, _DIRECT) else None))
            return
        if isinstance(node, _COMPREHENSIONS):
            inner = Scope("function", scope)
            for sub in ast.iter_child_nodes(node):
                push((sub, inner, mi, -1, None))
            return
        if self._binding(node, scope, mi, ci, direct, push):
            return
        blocks = not isinstance(node, _DIRECT) and isinstance(node, ast.stmt)
        for sub in ast.iter_child_nodes(node):
            push((sub, scope, mi, ci, None if blocks or
                  isinstance(node, ast.NamedExpr) else direct))

    def _function(self, node, scope, mi, ci, direct, push) -> None:
        """A def or lambda: its name, defaults, decorators and annotations
        in ``scope``; its parameters and body in a scope of its own."""
        if not isinstance(node, ast.Lambda):
            self._bind(scope, node.name, None, direct)
            for d in node.decorator_list:
                push((d, scope, mi, ci, None))
            if node.returns is not None:
                push((node.returns, scope, mi, ci, None))
        inner = Scope("function", scope)
        args = node.args
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                push((default, scope, mi, ci, None))
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                    *[a for a in (args.vararg, args.kwarg) if a]]:
            inner.bound.add(arg.arg)
            inner.values.setdefault(arg.arg, []).append(None)
            if arg.annotation is not None:
                push((arg.annotation, scope, mi, ci, None))
        body = node.body if isinstance(node.body, list) else [node.body]
        # Declarations first: they decide where the body's bindings go.
        for sub in body:
            for n in ast.walk(sub):
                if isinstance(n, ast.Global):
                    inner.declared_global.update(n.names)
                elif isinstance(n, ast.Nonlocal):
                    inner.declared_nonlocal.update(n.names)
        for sub in body:
            push((sub, inner, mi, -1, None))

    def _binding(self, node, scope, mi, ci, direct, push) -> bool:
        """Record what ``node`` binds or loads; True if its children are
        pushed (or it has none to visit)."""
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self._uses[id(node)] = _Use(scope, mi, ci)
            else:
                self._bind(scope, node.id, None, direct,
                           delete=isinstance(node.ctx, ast.Del))
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    self._bind(scope, alias.asname or
                               alias.name.split(".")[0], None, direct)
            return True
        name = getattr(node, "name", None) if isinstance(node, (
            ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) else \
            getattr(node, "rest", None) if isinstance(
                node, ast.MatchMapping) else None
        if name:
            self._bind(scope, name, None, None)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self._bind(scope, target.id, node.value, direct)
                else:
                    push((target, scope, mi, ci, direct))
            push((node.value, scope, mi, ci, None))
            return True
        if isinstance(node, ast.AugAssign) and \
                isinstance(node.target, ast.Name):
            # ``name += x`` needs ``name`` bound already: no new binding
            # that could hide a built-in, only a new value.
            owner = self.module if node.target.id in \
                scope.declared_global else scope
            owner.values.setdefault(node.target.id, []).append(("aug", node))
            self._uses[id(node.target)] = _Use(scope, mi, ci)
            push((node.value, scope, mi, ci, None))
            return True
        if isinstance(node, (ast.For, ast.AsyncFor)) and \
                isinstance(node.target, ast.Name):
            self._bind(scope, node.target.id, ("for", node.iter), None)
            for sub in [node.iter, *node.body, *node.orelse]:
                push((sub, scope, mi, ci, None))
            return True
        return False

    # ------------------------------------------------------------------
    def scope_of(self, node: ast.Name) -> Scope | None:
        """The scope a loaded name is used in (None if not recorded)."""
        use = self._uses.get(id(node))
        return use.scope if use else None

    def is_builtin(self, node: ast.Name) -> bool:
        """Whether the loaded name ``node`` may be the built-in (or a
        name Python gives every module, ``__builtins__``, ``__spec__``):
        not if a local or enclosing function binds it (a closure, or an
        UnboundLocalError: never the built-in), nor if the module (or the
        class whose body uses it) bound it before, unconditionally, and
        never deletes it."""
        use = self._uses.get(id(node))
        if use is None:
            return True
        name, scope, first = node.id, use.scope, True
        while scope.kind != "module":
            if name in scope.declared_global:
                scope = self.module
                break
            if scope.kind == "class":
                if first and _before(scope, name, use.class_index):
                    return False
            elif name in scope.bound or name in scope.declared_nonlocal:
                return False
            scope, first = scope.parent, False
        return not _before(self.module, name, use.module_index)

    def values(self, node: ast.Name) -> list | None:
        """What binds the loaded name ``node`` in the scope Python finds
        it in (``Scope.values``' items), or None when that is not known
        (a built-in, or a name bound nowhere in the module)."""
        use = self._uses.get(id(node))
        if use is None:
            return None
        scope = use.scope
        while scope is not None:
            if node.id in scope.declared_global:
                scope = self.module
            if node.id in scope.values:
                return scope.values[node.id]
            scope = scope.parent
            while scope is not None and scope.kind == "class":
                scope = scope.parent
        return None


def _before(scope: Scope, name: str, index: int) -> bool:
    """Whether ``scope`` (a module or class body) binds ``name``
    unconditionally in a statement before its statement ``index`` and
    never deletes it."""
    return name not in scope.deleted and \
        any(i < index for i in scope.direct.get(name, ()))
