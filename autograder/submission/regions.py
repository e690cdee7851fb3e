"""Where the student wrote code: the marked regions and their statements.

Shared by the worker (which instruments these statements to record shapes)
and by the static checks (shape comments, statement counts), so that both
agree on what "student code" is.

The methods whose code the student writes come from the rubric being
graded (``GradingConfig.task_methods``: class, "" for a module-level
function, -> methods); every function that needs them takes them as an
argument, so this module never reads a rubric.
"""
from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

START_MARKER = "# YOUR CODE STARTS HERE"
END_MARKER = "# YOUR CODE ENDS HERE"
_TASK_HEADER = re.compile(r"#\s*Task\s+(\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Region:
    """Lines ``start``..``end`` (1-based, inclusive) written by the student."""

    start: int
    end: int
    task: str    # "1.2", from the nearest "# Task 1.2" header above
    cls: str     # enclosing class name ("" at module level)
    function: str  # enclosing function name ("" if none)
    marked: bool = True  # False: a whole method whose markers are missing
    # True: a function the task's code calls (a helper method or a
    # module-level function), graded with that task: moving code out of
    # the marked places must not take it out of the deductions.
    helper: bool = False
    # A helper found by what ran (``graded_regions``' ``ran``): the first
    # line of its unit (decorators, ``def`` or the statement holding the
    # lambda), so the style check reads its header too; 0 otherwise.
    first: int = 0
    # True: lines of a task method outside its markers, judged like the
    # lines between them (code written above the START marker must not
    # escape the deductions).
    outside: bool = False


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Statements that hold blocks but define no scope: a class or function
# defined inside one (``if True:``, ``try:``, ``with ...:``) is still a
# module-level one to Python, and so to the grader.
_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With,
           ast.AsyncWith, ast.Try, ast.Match) + \
    ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists a block statement holds, in source order."""
    found = [getattr(node, f, []) for f in ("body", "orelse")]
    found += [h.body for h in getattr(node, "handlers", [])]
    found += [c.body for c in getattr(node, "cases", [])]
    found.append(getattr(node, "finalbody", []))
    return [b for b in found if b]


def flatten(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with every block statement (``if``, ``try``, ``with``,
    loops, ``match``) replaced by the statements it holds, recursively:
    the definitions and statements of that scope wherever they are
    indented. Iterative, in source order."""
    found: list[ast.stmt] = []
    stack = [iter(body)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
        elif isinstance(node, _BLOCKS):
            stack.append(iter([s for b in _blocks(node) for s in b]))
        else:
            found.append(node)
    return found


def _enclosing(tree: ast.AST, line: int) -> tuple[str, str]:
    # Module-level classes and functions (and methods) hold regions, at
    # any depth of block statements (``if True:``). Bisection over the
    # (sorted, disjoint) nodes of each level keeps a file of many markers
    # linear-logarithmic.
    node = _inner(getattr(tree, "body", []), line)
    if isinstance(node, ast.ClassDef):
        item = _inner(node.body, line)
        return node.name, item.name if isinstance(item, _FUNCS) else ""
    if isinstance(node, _FUNCS):
        return "", node.name
    return "", ""


def _inner(body: list[ast.stmt], line: int) -> ast.stmt | None:
    """The statement of ``body`` holding ``line``, looking inside block
    statements (not inside definitions)."""
    node = _containing(body, line)
    while isinstance(node, _BLOCKS):
        node = next((n for b in _blocks(node)
                     for n in [_containing(b, line)] if n is not None), None)
    return node


def _containing(nodes: list[ast.stmt], line: int) -> ast.stmt | None:
    """The node of ``nodes`` (in source order, disjoint) holding ``line``
    (decorators aside)."""
    i = bisect.bisect_right([n.lineno for n in nodes], line) - 1 \
        if len(nodes) < 64 else _bisect_nodes(nodes, line)
    if i >= 0 and nodes[i].lineno <= line <= nodes[i].end_lineno:
        return nodes[i]
    return None


def _bisect_nodes(nodes: list[ast.stmt], line: int) -> int:
    lo, hi = 0, len(nodes)
    while lo < hi:
        mid = (lo + hi) // 2
        if nodes[mid].lineno <= line:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def owner_of_line(source: str, line: int | None) -> str:
    """The module-level class or function whose code holds ``line`` ("" if
    none, or if ``source`` does not parse): which unit an exception came
    from, so that it is charged to that unit's item."""
    if line is None:
        return ""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    cls, func = _enclosing(tree, line)
    return cls or func


# Python ends a line at \r\n, \r or \n only; str.splitlines() also ends
# one at \v, \f, \x1c-\x1e, \x85, \u2028 and \u2029, which Python reads
# inside a line (a form feed in a docstring), so its line numbers drift.
_PY_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def python_lines(source: str, keepends: bool = False) -> list[str]:
    """The lines of ``source`` as Python's tokenizer and ``ast`` number
    them: line ``n`` (1-based) is item ``n - 1``. Every reader of the
    student's lines (regions, shape comments, pycodestyle) splits them
    here, so all of them see the lines Python sees."""
    found = _PY_LINE.findall(source)
    if keepends:
        return found
    return [line.rstrip("\r\n") for line in found]


def tokenizer_readline(source: str):
    """A ``readline`` for ``tokenize.generate_tokens`` that hands it the
    lines Python sees (``python_lines``), each ending in ``\n``: fed
    through ``io.StringIO``, the tokenizer takes a lone ``\r`` for a
    character inside a line, while ``ast`` ends the line there."""
    lines = iter([line.rstrip("\r\n") + "\n"
                  for line in python_lines(source, keepends=True)])
    return lambda: next(lines, "")


@functools.lru_cache(maxsize=8)
def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, once per source text: the static checks of
    one submission read the same tree (five tasks, six classes). Callers
    must not modify it. Raises SyntaxError (not cached) as ast.parse."""
    return ast.parse(source)


def nodes(source: str) -> Iterator[ast.AST]:
    """Every node of ``source``'s cached tree (``parse``), or none where
    it does not parse (a diagnosis reads what it can, never raises)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return iter(())
    return ast.walk(tree)


def find_regions(source: str, tree: ast.AST | None = None) -> list[Region]:
    """The marked student regions of ``source``, in file order.

    A START marker without a matching END runs to the end of its function.
    Raises SyntaxError if ``source`` does not parse and ``tree`` is None.
    """
    tree = tree if tree is not None else parse(source)
    lines = python_lines(source)
    regions = []
    task = ""
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        header = _TASK_HEADER.search(text)
        if header and text.startswith("#"):
            task = header.group(1)
        if text == START_MARKER:
            start = i + 2  # 1-based line after the marker
            cls, func = _enclosing(tree, i + 1)
            j = i + 1
            while j < len(lines) and lines[j].strip() != END_MARKER \
                    and lines[j].strip() != START_MARKER:
                j += 1
            end = j  # 1-based line before END (or last line)
            if j == len(lines) or lines[j].strip() == START_MARKER:
                end = _function_end(tree, i + 1) or len(lines)
            regions.append(Region(start, min(end, j), task, cls, func))
            # Resume after END; without one, rescan the lines up to the
            # next START so that START and its task header are seen.
            if j < len(lines) and lines[j].strip() == END_MARKER:
                i = j
        i += 1
    return regions


def graded_regions(source: str, tree: ast.AST | None = None, *,
                   methods: Mapping[str, tuple[str, ...]],
                   ran: Mapping[str, Iterable[int]] | None = None
                   ) -> list[Region]:
    """The regions the grader checks: the marked ones, plus, for each
    method of ``methods`` (class -> methods: the graded rubric's task
    methods) that holds no marked region, the method's body (docstring
    aside) as one unmarked region: deleting the markers must not take
    code out of the checks; and, for one that holds marked regions, its
    lines outside them as ``outside`` regions: code written above the
    START marker is judged as if between the markers. Linear in the
    source.

    ``ran`` (task class -> first lines of the functions and lambdas that
    ran while its traced calls ran, ``ProbeResult.shapes``' keys) adds
    each function of the submission that ran and no region covers, as a
    helper of the first task (in file order) that ran it: a helper called
    through a dict, ``getattr`` or a lambda is graded too. The static
    rule (what the code calls by name) stays as a floor."""
    if tree is None:
        # Once per source, rubric and trace: each task's static checks ask
        # again, and each answer costs walks of the whole tree.
        return list(_graded_cached(
            source, tuple(sorted((k, tuple(v)) for k, v in methods.items())),
            tuple(sorted((k, tuple(sorted(v))) for k, v in ran.items()))
            if ran else ()))
    return _graded(source, tree, methods, ran)


@functools.lru_cache(maxsize=8)
def _graded_cached(source: str, methods: tuple, ran: tuple
                   ) -> tuple[Region, ...]:
    return tuple(_graded(source, parse(source), dict(methods),
                         dict(ran) or None))


def _graded(source: str, tree: ast.AST,
            methods: Mapping[str, tuple[str, ...]],
            ran: Mapping[str, Iterable[int]] | None) -> list[Region]:
    marked = find_regions(source, tree)
    lines = python_lines(source)
    extra = []
    for owner, body in task_functions(tree, methods):
        start, end = _body_start(body), _end_with_comments(lines, body)
        if start is None:
            continue
        # A marker inside the method (its region may run past the last
        # statement into trailing comments): the lines outside its
        # markers are judged too.
        inside = [r for r in marked if body.lineno <= r.start - 1 <=
                  body.end_lineno]
        if inside:
            extra += _outside(lines, inside, start, end,
                              owner if owner != body.name else "",
                              body.name)
            continue
        extra.append(Region(start, end, _task_in(lines, body.lineno, end),
                            owner if owner != body.name else "", body.name,
                            marked=False))
    base = sorted(marked + extra, key=lambda r: r.start)
    found = base + _helpers(tree, base, methods, lines)
    if ran:
        found += _ran_helpers(tree, lines, found, ran)
    return sorted(found, key=lambda r: r.start)


def _outside(lines: list[str], inside: list[Region], start: int, end: int,
             cls: str, function: str) -> list[Region]:
    """The runs of lines ``start``..``end`` of a method that neither its
    marked regions nor their marker lines cover, each an ``outside``
    region of the task of the marked region after it (its header stands
    there), or of the last one. Linear in the number of regions."""
    ordered = sorted(inside, key=lambda r: r.start)
    found, line = [], start
    for i, (first, last) in enumerate([(r.start - 1, r.end + 1)
                                       for r in ordered]
                                      + [(end + 1, end + 1)]):
        if line < first:
            task = ordered[min(i, len(ordered) - 1)].task
            found.append(Region(line, min(first - 1, end), task, cls,
                                function, marked=False, outside=True))
        line = max(line, last + 1)
    return found


@dataclass(frozen=True)
class _Unit:
    """A function of the submission, or a statement outside every
    function that holds a lambda, as the trace records its entry."""

    key: int      # the line its entry is recorded at
    first: int    # its first line (decorators included)
    start: int    # its first line of code (docstring aside)
    end: int
    cls: str      # the class it is a method of ("" if none)
    name: str


def _units(tree: ast.AST, lines: list[str]) -> list[_Unit]:
    units = []

    def add_function(node: ast.AST, cls: str) -> None:
        start = _body_start(node)
        if start is not None:
            first = min([node.lineno] + [d.lineno
                                         for d in node.decorator_list])
            units.append(_Unit(node.lineno, first, start,
                               _end_with_comments(lines, node), cls,
                               node.name))

    def add_lambdas(stmt: ast.stmt, cls: str) -> None:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Lambda):
                targets = bound_targets(stmt)
                name = targets[0].id if targets and \
                    isinstance(targets[0], ast.Name) else "<lambda>"
                units.append(_Unit(node.lineno, stmt.lineno, stmt.lineno,
                                   stmt.end_lineno, cls, name))

    def add_nested(function: ast.AST, cls: str) -> None:
        # Functions defined inside a function (a ``def`` in ``__init__``
        # that forward runs): code above the markers is graded too.
        for node in ast.walk(function):
            if node is not function and isinstance(node, _FUNCS):
                add_function(node, cls)

    for node in flatten(getattr(tree, "body", [])):
        if isinstance(node, _FUNCS):
            add_function(node, "")
            add_nested(node, "")
        elif isinstance(node, ast.ClassDef):
            for item in flatten(node.body):
                if isinstance(item, _FUNCS):
                    add_function(item, node.name)
                    add_nested(item, node.name)
                else:
                    add_lambdas(item, node.name)
        else:
            add_lambdas(node, "")
    return units


def _ran_helpers(tree: ast.AST, lines: list[str], covered: list[Region],
                 ran: Mapping[str, Iterable[int]]) -> list[Region]:
    """The functions that ran while a task's traced calls ran and that no
    region covers, each a helper region of the first task (in file order)
    that ran it."""
    where = {n.name: n.lineno for n in flatten(getattr(tree, "body", []))
             if isinstance(n, (ast.ClassDef, *_FUNCS))}
    units = _units(tree, lines)
    regions = list(covered)
    found: list[Region] = []
    for owner in sorted(ran, key=lambda c: where.get(c, len(lines) + 1)):
        keys = set(ran[owner])
        task = next((r.task for r in covered
                     if (r.cls or r.function) == owner), "")
        for unit in units:
            if unit.key not in keys or any(
                    unit.first <= r.start <= unit.end or
                    r.start <= unit.start <= r.end for r in regions):
                continue
            region = Region(unit.start, unit.end, task, owner, unit.name,
                            marked=False, helper=True, first=unit.first)
            found.append(region)
            regions.append(region)
    return found


def _end_with_comments(lines: list[str], node: ast.AST) -> int:
    """The last line of a function, with the comment lines right after
    it that are indented into its body (the notebook allows a shape
    comment "on a comment line right after the statement", also after a
    final ``return``, as a marked region's END marker would include)."""
    end = node.end_lineno
    while end < len(lines):
        text = lines[end]
        stripped = text.lstrip()
        if not stripped.startswith("#") or \
                len(text) - len(stripped) <= node.col_offset:
            break
        end += 1
    return end


def _body_start(node: ast.AST) -> int | None:
    """The first line of a function's body, its docstring aside."""
    stmts = node.body
    if stmts and isinstance(stmts[0], ast.Expr) and \
            isinstance(stmts[0].value, ast.Constant) and \
            isinstance(stmts[0].value.value, str):
        stmts = stmts[1:]
    return stmts[0].lineno if stmts else None


def _helpers(tree: ast.AST, base: list[Region],
             table: Mapping[str, tuple[str, ...]],
             lines: list[str]) -> list[Region]:
    """The functions the graded code calls, transitively, that no region
    covers: ``self.name(...)`` of a method of the same class, or
    ``name(...)`` of a module-level function that is no task's. Each is
    graded with the first task (in file order) whose code calls it."""
    body = flatten(getattr(tree, "body", []))
    module = {n.name: n for n in body if isinstance(n, _FUNCS)}
    functions = {name: f for name, f in module.items()
                 if "" not in table.get(name, ())}
    methods = {(c.name, f.name): f for c in body
               if isinstance(c, ast.ClassDef) for f in flatten(c.body)
               if isinstance(f, _FUNCS)}
    graded = {(r.cls, r.function) for r in base}
    done = {id(f) for key, f in methods.items() if key in graded}
    done |= {id(f) for name, f in module.items() if ("", name) in graded}
    found: list[Region] = []
    queue = list(base)
    calls: dict[int, tuple[list[int], list[ast.Call]]] = {}
    while queue:
        region = queue.pop(0)
        scope = (methods.get((region.cls, region.function)) if region.cls
                 else None) or module.get(region.function)
        if scope is None:
            continue
        for call in _calls_in(scope, region, calls):
            func, target = call.func, None
            if isinstance(func, ast.Name):
                target = functions.get(func.id)
            elif isinstance(func, ast.Attribute) and region.cls and \
                    isinstance(func.value, ast.Name) and \
                    func.value.id == "self":
                target = methods.get((region.cls, func.attr))
            start = _body_start(target) if target is not None else None
            if start is None or id(target) in done:
                continue
            done.add(id(target))
            helper = Region(start, _end_with_comments(lines, target),
                            region.task, region.cls, target.name,
                            marked=False, helper=True)
            found.append(helper)
            queue.append(helper)
    return found


def _calls_in(scope: ast.AST, region: Region,
              cache: dict[int, tuple[list[int], list[ast.Call]]]
              ) -> list[ast.Call]:
    """The calls of ``scope`` on the lines of ``region``: the scope is
    walked once (``cache``), then bisected by line, so thousands of regions
    in one method stay linear-logarithmic (walking it per region was
    quadratic: 24 s of CPU on test_many_markers_are_all_regions)."""
    if id(scope) not in cache:
        found = sorted((c for c in ast.walk(scope) if isinstance(c, ast.Call)),
                       key=lambda c: c.lineno)
        cache[id(scope)] = ([c.lineno for c in found], found)
    lines, found = cache[id(scope)]
    return found[bisect.bisect_left(lines, region.start):
                 bisect.bisect_right(lines, region.end)]


def task_functions(tree: ast.AST, table: Mapping[str, tuple[str, ...]]
                   ) -> list[tuple[str, ast.FunctionDef]]:
    """(owner, function node) for every ``table`` entry present (the
    rubric's class -> methods; a module-level function's entry is its
    name -> ("",)), wherever block statements indent it."""
    found = []
    for node in flatten(getattr(tree, "body", [])):
        methods = table.get(getattr(node, "name", ""), ())
        if isinstance(node, ast.ClassDef):
            found += [(node.name, item) for item in flatten(node.body)
                      if isinstance(item, _FUNCS) and item.name in methods]
        elif isinstance(node, _FUNCS) and "" in methods:
            found.append((node.name, node))
    return found


def _task_in(lines: list[str], start: int, end: int) -> str:
    """The task of the first "# Task N" header in lines ``start``..``end``
    (1-based), else of the last one above them."""
    task = ""
    for number, text in enumerate(lines[:end], 1):
        text = text.strip()
        header = _TASK_HEADER.search(text) if text.startswith("#") else None
        if header:
            task = header.group(1)
            if number >= start:
                break
    return task


def _function_end(tree: ast.AST, line: int) -> int | None:
    # The innermost function holding ``line``: descend from the module
    # through the nodes that contain it (linear in the nesting depth and
    # logarithmic in each body's size, not in the whole tree's).
    best, node = None, tree
    while True:
        inner = None
        for field in ("body", "orelse", "finalbody", "handlers"):
            child = _containing(getattr(node, field, []), line)
            if child is not None:
                inner = child
                break
        if inner is None:
            return best.end_lineno if best else None
        if isinstance(inner, _FUNCS):
            best = inner
        node = inner


_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


def target_values(target: ast.expr) -> list[ast.expr]:
    """Load-expressions for the names a target binds (Name, self.attr and
    tuples/lists of them); other targets (subscripts, ...) are skipped."""
    if isinstance(target, ast.Name):
        return [ast.Name(target.id, ast.Load())]
    if isinstance(target, ast.Attribute) and \
            isinstance(target.value, ast.Name) and target.value.id == "self":
        return [ast.Attribute(ast.Name("self", ast.Load()), target.attr,
                              ast.Load())]
    if isinstance(target, ast.Starred):
        return target_values(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [v for elt in target.elts for v in target_values(elt)]
    return []


def bound_targets(node: ast.stmt) -> list[ast.expr]:
    """The targets a binding statement assigns ([] for other ones)."""
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target]
    if isinstance(node, ast.AugAssign):
        return [node.target]
    return []


def recorded(node: ast.stmt) -> bool:
    """Whether the shape tracer records ``node`` each time it runs (the
    worker's instrumenter and the parent's trace check share this)."""
    if isinstance(node, ast.Return):
        return node.value is not None
    return any(target_values(t) for t in bound_targets(node))


def student_statements(tree: ast.AST,
                       regions: list[Region]) -> list[tuple[Region, ast.stmt]]:
    """Simple statements (assignments, returns, expressions) whose first line
    lies in a region, including those nested in if/for/with blocks there."""
    ordered = sorted(regions, key=lambda r: r.start)
    starts = [r.start for r in ordered]
    found = []
    for node in _simple_statements(tree):
        i = bisect.bisect_right(starts, node.lineno) - 1
        if i >= 0 and node.lineno <= ordered[i].end:
            found.append((ordered[i], node))
    found.sort(key=lambda pair: pair[1].lineno)
    return found


@functools.lru_cache(maxsize=8)
def _simple_statements(tree: ast.AST) -> tuple[ast.stmt, ...]:
    """Every simple statement of ``tree``, walked once per tree: each
    task's checks ask for their own regions' statements."""
    return tuple(node for node in ast.walk(tree)
                 if isinstance(node, _SIMPLE))
