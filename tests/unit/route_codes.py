"""The error codes each REST operation can answer, read from the code (no server runs).

Every refusal is a `ServiceError` (core/errors.py) built at a raise site with a literal code and
status, or an answer tuple built by a small factory (`wire/output_reads.error`). This module finds
those sites with `ast`, follows factories that pass a code through their own parameters (a helper
`_refuse(where, code, ...)`, `int_arg("offset")` making `invalid_offset`), and walks a call graph
from each handler method to the sites it can reach. The graph resolves a call by the receiver's
type where the code says it (`self.service: RunService`, `self.studies = StudyService(...)`, an
annotated parameter), else by the method's name when only one function of that name exists.

What it finds is an upper bound of what a route answers: a code raised in a background task or
caught on the way is reachable but never answered. Those are listed, with the reason, in
test_openapi_codes.py, not guessed here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PKG = "codefy_jupyter"
# The control plane's code: what a REST handler can reach (the engine and agent run elsewhere or
# raise plain exceptions that the service wraps).
PARTS = ("server", "core", "wire")
ERROR_ROOT = f"{PKG}.core.errors.ServiceError"


@dataclass(frozen=True)
class Site:
    code: str
    status: int
    where: str  # file:line
    cls: str | None = None  # the exception class (None: an answer built without raising)


@dataclass
class Func:
    name: str  # module.Class.func or module.func
    module: str
    cls: str | None
    node: ast.FunctionDef | ast.AsyncFunctionDef
    params: list[str]  # positional, without self
    names: set[str]  # every parameter name
    defaults: dict[str, Any]


@dataclass
class Cls:
    name: str
    module: str
    node: ast.ClassDef
    bases: list[str] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, set[str]] = field(default_factory=dict)  # attribute -> class names
    consts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Factory:
    """How a callable turns its arguments into an error: code and status each a literal, or taken
    from a parameter (by position or name), or (code only) a template around one."""

    code: tuple[str, Any]  # ("lit", "x") | ("param", name) | ("template", (prefix, name, suffix))
    status: tuple[str, Any]
    cls: str | None = None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class Index:
    def __init__(self) -> None:
        self.funcs: dict[str, Func] = {}
        self.classes: dict[str, Cls] = {}
        self.imports: dict[str, dict[str, str]] = {}  # module -> local name -> qualified name
        self.consts: dict[str, dict[str, Any]] = {}
        self.files: dict[str, Path] = {}
        self.by_name: dict[str, list[str]] = {}
        for part in PARTS:
            for path in sorted((ROOT / PKG / part).rglob("*.py")):
                self._read(path)
        for cls in self.classes.values():
            cls.bases = [self._qualify(cls.module, ast.unparse(b)) for b in cls.node.bases]
        for cls in self.classes.values():
            self._attrs(cls)

    # -- reading ---------------------------------------------------------------------------------
    def _read(self, path: Path) -> None:
        module = _module_name(path)
        self.files[module] = path
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        imports: dict[str, str] = {}
        consts: dict[str, Any] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    imports[a.asname or a.name] = f"{mod}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        consts[t.id] = node.value.value
            elif isinstance(node, ast.ClassDef):
                self._class(module, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._func(module, None, node)
        self.imports[module] = imports
        self.consts[module] = consts

    def _class(self, module: str, node: ast.ClassDef) -> None:
        cls = Cls(f"{module}.{node.name}", module, node)
        self.classes[cls.name] = cls
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cls.methods[item.name] = self._func(module, cls.name, item)
            elif isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                for t in item.targets:
                    if isinstance(t, ast.Name):
                        cls.consts[t.id] = item.value.value

    def _func(self, module: str, cls: str | None, node: Any) -> str:
        name = f"{cls or module}.{node.name}"
        args = node.args
        params = [a.arg for a in args.posonlyargs + args.args]
        if cls is not None and params and params[0] in ("self", "cls"):
            params = params[1:]
        defaults: dict[str, Any] = {}
        positional = args.posonlyargs + args.args
        for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            if isinstance(d, ast.Constant):
                defaults[a.arg] = d.value
        for a, d in zip(args.kwonlyargs, args.kw_defaults):
            if isinstance(d, ast.Constant):
                defaults[a.arg] = d.value
        names = {a.arg for a in positional + args.kwonlyargs}
        self.funcs[name] = Func(name, module, cls, node, params, names, defaults)
        self.by_name.setdefault(node.name, []).append(name)
        return name

    def _qualify(self, module: str, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        if head in self.imports.get(module, {}):
            base = self._follow(self.imports[module][head])
            return self._follow(f"{base}.{rest}") if rest else base
        if f"{module}.{head}" in self.classes or f"{module}.{head}" in self.funcs:
            return f"{module}.{dotted}"
        return dotted

    def _follow(self, name: str) -> str:
        """A name one module re-exports from another, as the module that defines it."""
        for _ in range(10):
            mod, _, attr = name.rpartition(".")
            if name in self.classes or name in self.funcs or attr not in self.imports.get(mod, {}):
                return name
            name = self.imports[mod][attr]
        return name

    def _attrs(self, cls: Cls) -> None:
        """Attribute types a class states: `x: T` in its body, `self.x = T(...)`, `self.x = p` with
        `p: T`, a property's return annotation."""
        for item in cls.node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                cls.attrs.setdefault(item.target.id, set()).update(self.types_of(cls.module, item.annotation))
        for mname, fname in cls.methods.items():
            func = self.funcs[fname]
            if any(ast.unparse(d) == "property" for d in func.node.decorator_list) and func.node.returns is not None:
                cls.attrs.setdefault(mname, set()).update(self.types_of(cls.module, func.node.returns))
            local = self.local_types(func)
            for node in ast.walk(func.node):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            found = set()
                            if isinstance(node, ast.AnnAssign):
                                found |= self.types_of(cls.module, node.annotation)
                            if node.value is not None:
                                found |= self.expr_types(cls.module, node.value, local)
                            if found:
                                cls.attrs.setdefault(t.attr, set()).update(found)

    def types_of(self, module: str, annotation: ast.AST) -> set[str]:
        """Our classes an annotation names (`T`, `T | None`, `"T"`)."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return set()
        out = set()
        for node in ast.walk(annotation):
            if isinstance(node, (ast.Name, ast.Attribute)):
                q = self._qualify(module, ast.unparse(node))
                if q in self.classes:
                    out.add(q)
        return out

    def expr_types(self, module: str, value: ast.AST, local: dict[str, set[str]]) -> set[str]:
        """Our classes an expression gives: `T(...)`, a local of known type, a call whose function
        is annotated (`await app.ready()` with `ready() -> RunService`, when one function has that
        name), either side of `a or b` / `a if c else b`. Not the arguments of a call."""
        if isinstance(value, ast.Await):
            return self.expr_types(module, value.value, local)
        if isinstance(value, ast.BoolOp):
            return set().union(*(self.expr_types(module, v, local) for v in value.values))
        if isinstance(value, ast.IfExp):
            return self.expr_types(module, value.body, local) | self.expr_types(module, value.orelse, local)
        if isinstance(value, ast.Name):
            return set(local.get(value.id, ()))
        if isinstance(value, ast.Call):
            q = self._qualify(module, ast.unparse(value.func))
            if q in self.classes:
                return {q}
            if isinstance(value.func, ast.Attribute) and len(self.by_name.get(value.func.attr, [])) == 1:
                func = self.funcs[self.by_name[value.func.attr][0]]
                if func.node.returns is not None:
                    return self.types_of(func.module, func.node.returns)
        return set()

    def local_types(self, func: Func) -> dict[str, set[str]]:
        local: dict[str, set[str]] = {}
        args = func.node.args
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            if a.annotation is not None:
                local[a.arg] = self.types_of(func.module, a.annotation)
        for node in ast.walk(func.node):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found = self.expr_types(func.module, node.value, {})
                if found:
                    local.setdefault(node.targets[0].id, set()).update(found)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                local.setdefault(node.target.id, set()).update(self.types_of(func.module, node.annotation))
        if func.cls is not None:
            local["self"] = {func.cls}
        return local

    # -- classes -----------------------------------------------------------------------------------
    def mro(self, cls: str) -> list[str]:
        out, todo = [], [cls]
        while todo:
            c = todo.pop(0)
            if c in self.classes and c not in out:
                out.append(c)
                todo.extend(self.classes[c].bases)
        return out

    def is_error(self, cls: str) -> bool:
        return ERROR_ROOT in self.mro(cls)

    def method(self, cls: str, name: str) -> str | None:
        for c in self.mro(cls):
            if name in self.classes[c].methods:
                return self.classes[c].methods[name]
        return None

    def attr_types(self, cls: str, attr: str) -> set[str]:
        for c in self.mro(cls):
            if attr in self.classes[c].attrs:
                return self.classes[c].attrs[attr]
        return set()

    def class_const(self, cls: str, name: str) -> Any:
        for c in self.mro(cls):
            if name in self.classes[c].consts:
                return self.classes[c].consts[name]
        return None


@lru_cache(maxsize=None)
def index() -> Index:
    return Index()


# -- raise sites and factories ------------------------------------------------------------------------

# Plain functions that build an error answer (status, body) instead of raising: the recorded-outputs
# reads answer with these, here or relayed from a worker.
ANSWER_FACTORIES = {f"{PKG}.wire.output_reads.error": Factory(("param", "code"), ("param", "status"), None)}

Value = tuple  # ("lit", v) | ("param", name) | ("template", prefix, name, suffix) | ("opaque", text)


class Sites:
    """Every raise site (code, status) per function, and every function that passes a code through."""

    def __init__(self, ix: Index) -> None:
        self.ix = ix
        self.factories: dict[str, Factory] = dict(ANSWER_FACTORIES)
        self.by_func: dict[str, set[Site]] = {}
        self.opaque: dict[str, list[str]] = {}
        for name, cls in ix.classes.items():
            if ix.is_error(name):
                self.factories[name] = self._class_factory(name)
        for _ in range(5):  # factories of factories (a helper around int_arg, say)
            before = len(self.factories)
            self.by_func, self.opaque = {}, {}
            for func in ix.funcs.values():
                self._scan(func)
            if len(self.factories) == before:
                break

    def _class_factory(self, cls: str) -> Factory:
        ix = self.ix
        init = ix.method(cls, "__init__")
        if init is None or ix.funcs[init].cls == ERROR_ROOT:
            return Factory(("param", "code"), ("param", "status"), cls)
        func = ix.funcs[init]
        for node in ast.walk(func.node):
            if isinstance(node, ast.Call) and (ast.unparse(node.func) == "super().__init__"
                                               or ix._qualify(func.module, ast.unparse(node.func)) == ERROR_ROOT):
                kw = {k.arg: k.value for k in node.keywords}
                return Factory(self._value(func, kw.get("code")), self._value(func, kw.get("status")), cls)
        return Factory(("param", "code"), ("param", "status"), cls)

    def _value(self, func: Func, node: ast.AST | None) -> Value:
        if node is None:
            return ("default",)
        if isinstance(node, ast.Constant):
            return ("lit", node.value)
        if isinstance(node, ast.Name):
            if node.id in func.names:
                return ("param", node.id)
            consts = self.ix.consts[func.module]
            if node.id in consts:
                return ("lit", consts[node.id])
            q = self.ix._qualify(func.module, node.id)
            mod, _, attr = q.rpartition(".")
            if attr in self.ix.consts.get(mod, {}):
                return ("lit", self.ix.consts[mod][attr])
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            names = [p for p in parts if isinstance(p, ast.FormattedValue)]
            if len(names) == 1 and isinstance(names[0].value, ast.Name) and names[0].value.id in func.names:
                i = parts.index(names[0])
                lit = lambda ps: "".join(p.value for p in ps if isinstance(p, ast.Constant))  # noqa: E731
                return ("template", lit(parts[:i]), names[0].value.id, lit(parts[i + 1:]))
        return ("opaque", ast.unparse(node))

    def callee(self, func: Func, call: ast.Call) -> str | None:
        q = self.ix._qualify(func.module, ast.unparse(call.func))
        if q in self.factories:
            return q
        if q in self.ix.classes and self.ix.method(q, "__init__") in self.factories:
            return self.ix.method(q, "__init__")
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
                and call.func.value.id == "self" and func.cls is not None:
            m = self.ix.method(func.cls, call.func.attr)
            if m in self.factories:
                return m
        return None

    def _bind(self, factory_name: str, call: ast.Call) -> dict[str, ast.AST]:
        ix = self.ix
        if factory_name in ix.classes:
            init = ix.method(factory_name, "__init__")
            params = ix.funcs[init].params if init else []
        else:
            params = ix.funcs[factory_name].params if factory_name in ix.funcs else ["status", "code"]
        bound = {p: a for p, a in zip(params, call.args)}
        bound.update({k.arg: k.value for k in call.keywords if k.arg})
        return bound

    def _resolve(self, factory_name: str, part: str, spec: tuple, bound: dict[str, ast.AST], func: Func) -> Value:
        """A factory's code or status at one call, in the caller's terms."""
        ix = self.ix
        if spec[0] == "lit":
            return spec
        if spec[0] == "default":
            return ("lit", ix.class_const(factory_name, part))
        name = spec[1] if spec[0] == "param" else spec[2]
        if name not in bound:
            init = ix.method(factory_name, "__init__") if factory_name in ix.classes else factory_name
            default = ix.funcs[init].defaults.get(name) if init in ix.funcs else None
            if default is None and factory_name in ix.classes:
                default = ix.class_const(factory_name, part)
            if default is None:
                return ("opaque", f"{name} unset")
            value: Value = ("lit", default)
        else:
            value = self._value(func, bound[name])
            if value == ("lit", None) and factory_name in ix.classes:
                value = ("lit", ix.class_const(factory_name, part))
        if spec[0] == "template":
            if value[0] == "lit":
                return ("lit", f"{spec[1]}{value[1]}{spec[3]}")
            if value[0] == "param":
                return ("template", spec[1], value[1], spec[3])
            return ("opaque", str(value))
        return value

    def _scan(self, func: Func) -> None:
        for node in _body_nodes(func.node):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                q = self.ix._qualify(func.module, node.exc.func.id)
                if q == node.exc.func.id and q not in __builtins__:  # neither ours nor imported: a variable
                    where = f"{self.ix.files[func.module].relative_to(ROOT)}:{node.lineno}"
                    self.opaque.setdefault(func.name, []).append(f"{where}: raises a class chosen at run time")
            if not isinstance(node, ast.Call):
                continue
            target = self.callee(func, node)
            if target is None or target == func.name:
                continue
            factory = self.factories[target]
            bound = self._bind(target, node)
            code = self._resolve(target, "code", factory.code, bound, func)
            status = self._resolve(target, "status", factory.status, bound, func)
            where = f"{self.ix.files[func.module].relative_to(ROOT)}:{node.lineno}"
            if code[0] == "lit" and status[0] == "lit":
                q = self.ix._qualify(func.module, ast.unparse(node.func))
                cls = q if q in self.ix.classes else factory.cls
                self.by_func.setdefault(func.name, set()).add(Site(code[1], int(status[1]), where, cls))
            elif code[0] != "opaque" and status[0] != "opaque":
                if func.name not in self.factories:
                    self.factories[func.name] = Factory(code, status, factory.cls)
            else:
                self.opaque.setdefault(func.name, []).append(f"{where}: code {code}, status {status}")


# Calls that run their argument later, on its own: what it raises is logged, never answered.
BACKGROUND = ("create_task", "call_later", "call_soon", "call_soon_threadsafe", "PeriodicCallback",
              "add_done_callback", "add_callback", "spawn_callback")


def _body_nodes(func: ast.AST):
    for node, _ in _walk(func):
        yield node


def _walk(func: ast.AST):
    """The nodes of a function's arguments and body, not its decorators (a decorator such as
    `api` wraps the method; its own refusals are the framework's), nor what it hands to the loop to
    run in the background; each with the exception types that a `try` around it swallows (a
    handler with no `raise` in it)."""
    todo: list[tuple[ast.AST, frozenset[str]]] = [(n, frozenset()) for n in (*func.args.defaults, *func.body)]
    while todo:
        node, caught = todo.pop()
        yield node, caught
        if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in BACKGROUND:
            todo.append((node.func, caught))
            continue
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            swallowed = set()
            for h in node.handlers:
                # A handler that raises again, or answers the error itself (`self.fail(err)`), swallows nothing.
                if not any(isinstance(n, ast.Raise) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                                        and n.func.attr == "fail") for n in ast.walk(h)):
                    types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                    swallowed |= {"BaseException" if t is None else ast.unparse(t) for t in types}
            todo.extend((n, caught | swallowed) for n in node.body)
            todo.extend((n, caught) for part in (node.handlers, node.orelse, node.finalbody) for n in part)
            continue
        todo.extend((n, caught) for n in ast.iter_child_nodes(node))


# -- the call graph -----------------------------------------------------------------------------------

class Graph:
    def __init__(self, ix: Index) -> None:
        self.ix = ix
        self.ambiguous: set[tuple[str, str]] = set()
        self._edges: dict[tuple[str, str | None], set[tuple[str, str | None, frozenset[str]]]] = {}

    def receiver_types(self, func: Func, node: ast.AST, local: dict[str, set[str]], self_cls: str | None) -> set[str]:
        ix = self.ix
        if isinstance(node, ast.Name):
            if node.id == "self" and self_cls is not None:
                return {self_cls}
            if node.id in local:
                return local[node.id]
            q = ix._qualify(func.module, node.id)
            return {q} if q in ix.classes else set()
        if isinstance(node, ast.Attribute):
            out: set[str] = set()
            for t in self.receiver_types(func, node.value, local, self_cls):
                out |= ix.attr_types(t, node.attr)
            return out
        if isinstance(node, ast.Call):
            if ast.unparse(node.func) == "super" and func.cls is not None:
                mro = ix.mro(self_cls or func.cls)
                after = mro[mro.index(func.cls) + 1:] if func.cls in mro else ix.classes[func.cls].bases
                return {after[0]} if after else set()
            q = ix._qualify(func.module, ast.unparse(node.func))
            return {q} if q in ix.classes else set()
        return set()

    def edges(self, func: Func, self_cls: str | None) -> set[tuple[str, str | None, frozenset[str]]]:
        """(function, self class) pairs the function calls or hands on as a callback."""
        key = (func.name, self_cls)
        if key not in self._edges:
            self._edges[key] = self._find_edges(func, self_cls)
        return self._edges[key]

    def _find_edges(self, func: Func, self_cls: str | None) -> set[tuple[str, str | None, frozenset[str]]]:
        ix = self.ix
        local = ix.local_types(func)
        if self_cls is not None:
            local.pop("self", None)
        called = {id(n.func) for n in _body_nodes(func.node) if isinstance(n, ast.Call)}
        found_edges: set[tuple[str, str | None, frozenset[str]]] = set()
        for node, caught_names in _walk(func.node):
            out: set[tuple[str, str | None]] = set()
            self._node_edges(func, self_cls, local, called, node, out)
            caught = frozenset("*" if n in ("Exception", "BaseException") else ix._qualify(func.module, n)
                               for n in caught_names)
            found_edges |= {(f, c, caught) for f, c in out}
        return found_edges

    def _node_edges(self, func: Func, self_cls: str | None, local: dict[str, set[str]], called: set[int],
                    node: ast.AST, out: set[tuple[str, str | None]]) -> None:
        ix = self.ix
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            q = ix._qualify(func.module, node.id)
            if q in ix.funcs:
                out.add((q, None))
            elif q in ix.classes:
                init = ix.method(q, "__init__")
                if init:
                    out.add((init, q))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            q = ix._qualify(func.module, ast.unparse(node)) if isinstance(node.value, ast.Name) else None
            if q in ix.funcs:
                out.add((q, None))
                return
            types = self.receiver_types(func, node.value, local, self_cls)
            found = False
            for t in types:
                m = ix.method(t, node.attr)
                if m is not None:
                    out.add((m, t))
                    found = True
            if found or types:
                return
            if id(node) not in called:
                return  # an attribute of unknown type read, not called: data, not code
            candidates = [c for c in ix.by_name.get(node.attr, []) if ix.funcs[c].cls is not None]
            if len(candidates) == 1:
                out.add((candidates[0], ix.funcs[candidates[0]].cls))
            elif candidates:
                self.ambiguous.add((func.name, node.attr))

    def reach(self, entries: list[tuple[str, str | None]],
              boundaries: frozenset[str] = frozenset()) -> set[tuple[str, frozenset[str]]]:
        """Every function the entries can run, not entering `boundaries`, each with the exception
        types a caller on the way swallows."""
        seen: set[tuple[str, str | None, frozenset[str]]] = set()
        todo = [(f, c, frozenset()) for f, c in entries]
        while todo:
            item = todo.pop()
            if item in seen or item[0] not in self.ix.funcs or item[0] in boundaries:
                continue
            seen.add(item)
            todo.extend((f, c, item[2] | caught) for f, c, caught in self.edges(self.ix.funcs[item[0]], item[1]))
        return {(f, caught) for f, _, caught in seen}

    def swallowed(self, site: Site, caught: frozenset[str]) -> bool:
        if not caught or site.cls is None:
            return False
        return "*" in caught or bool(caught & set(self.ix.mro(site.cls)))


@lru_cache(maxsize=None)
def sites() -> Sites:
    return Sites(index())


@lru_cache(maxsize=None)
def graph_() -> Graph:
    return Graph(index())


def operation_codes(handler: type, method: str,
                    boundaries: frozenset[str] = frozenset()) -> dict[int, dict[str, set[str]]]:
    """status -> code -> the raise sites, for every site `handler.method` can reach."""
    ix, found = index(), sites()
    cls = f"{handler.__module__}.{handler.__qualname__}"
    entries = [(m, cls) for m in (ix.method(cls, method), ix.method(cls, "prepare"),
                                  ix.method(cls, "data_received"), ix.method(cls, "decode_argument")) if m]
    graph = graph_()
    out: dict[int, dict[str, set[str]]] = {}
    for f, caught in graph.reach(entries, boundaries):
        for site in found.by_func.get(f, ()):
            if graph.swallowed(site, caught):
                continue
            out.setdefault(site.status, {}).setdefault(site.code, set()).add(site.where)
    return out
