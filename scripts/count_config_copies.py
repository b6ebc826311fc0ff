"""Count the configuration fields copied by hand from one object into another.

Method (issue 28 item 2): walk the syntax tree of every module under ``src/flowsplit``
and count

1. **into a config**: keyword arguments of a call to a config class (a name ending in
   ``Config``, ``Options``, ``Spec`` or ``Choice``), to ``replace`` or to a
   ``resolve...config`` function whose value is read from another object
   (``PrivacyConfig(epochs=args.epochs)``, ``replace(cfg, seed=study.cfg.seed)``; also
   through one call: ``tuple(args.cuts)``), or from a key of an options dict
   (``resolve_study_config(rounds=opts["rounds"])``: a config's fields carried in a dict
   first), or is the
   enclosing function's parameter of the same name rebuilt into a config
   (``CompareConfig(models=list(models))``); only classes defined in flowsplit count
   (the suffixes are kept for configs: a result row named ``...Choice`` was renamed);
2. **into a dict**: entries of a dict literal that copy a field of a config object (a
   name ``cfg``, ``config``, ``args``, ``opts``, ``options`` or ending in
   ``_cfg``/``_config``) under its own name: ``{"rounds": cfg.rounds}``,
   ``{"rounds": opts["rounds"]}`` (config kwargs
   built by hand, and records that restate a config).

Passing a field to a function (``make_optimizer(lr=cfg.lr)``) is a use, not a copy, and
does not count. Nor does ``replace(self, ...)`` in a method of a class that is not a
config (``Topology.with_trace(trace)``, ``RoundPlan.with_network(...)``: a runtime object
returned with a field set to the method's argument): no configuration is copied there.
(This exception was added after the first count, whose only hits of that shape were
those two methods, three fields: a false positive of rule 1's parameter clause, which
was written for a function that rebuilds a config from its own parameters.) Each keyword or entry counted is one hand-copied field. Copies made by a generic function
(``config_from_args``, ``project``) do not count: the field is written once. Run:
``python scripts/count_config_copies.py [--list]``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "flowsplit"
CONFIG_SUFFIXES = ("Config", "Options", "Spec", "Choice")
CONFIG_NAMES = {"cfg", "config", "args", "opts", "options"}


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def _base(node: ast.AST) -> str | None:
    """The object an attribute or a key is read from (``args`` of ``args.x``, ``cfg`` of
    ``study.cfg.x``, ``opts`` of ``opts["x"]``), through one call (``tuple(args.x)``)."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, ast.Subscript):
        # A key of an options dict (``opts["x"]``), not of a document read back.
        inner = node.value
        name = inner.id if isinstance(inner, ast.Name) else getattr(inner, "attr", None)
        return name if _key(node) is not None and _configish(name) else None
    if isinstance(node, ast.Attribute):
        inner = node.value
        if isinstance(inner, ast.Name):
            return inner.id
        if isinstance(inner, ast.Attribute):
            return inner.attr
    return None


def _param(node: ast.AST) -> str | None:
    """``x`` of ``x`` or ``list(x)``: a local name passed on."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    return node.id if isinstance(node, ast.Name) else None


def _key(node: ast.Subscript) -> str | None:
    """``"x"`` of ``opts["x"]``: a constant string key."""
    key = node.slice
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, ast.Subscript):
        return _key(node)
    return node.attr if isinstance(node, ast.Attribute) else None


def _builds_config(name: str, classes: set[str]) -> bool:
    """A call that makes a config from its keywords: a config class, ``replace``, or a
    ``resolve...config`` function (``resolve_study_config(rounds=opts["rounds"])``)."""
    return (
        name in classes
        or name == "replace"
        or (name.startswith("resolve") and name.endswith("config"))
    )


def _configish(name: str | None) -> bool:
    return bool(name) and (
        name in CONFIG_NAMES or name.endswith("_cfg") or name.endswith("_config")
    )


def _classes() -> set[str]:
    """Config classes flowsplit defines (a name with a config suffix)."""
    names = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith(CONFIG_SUFFIXES):
                names.add(node.name)
    return names


def _params(tree: ast.AST) -> dict[int, set[str]]:
    """``{id(call): parameters of the function around it}``."""
    around: dict[int, set[str]] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            a = fn.args
            names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    around[id(node)] = names
    return around


def _runtime_self_replaces(tree: ast.AST, classes: set[str]) -> set[int]:
    """``{id(call)}`` of the ``replace(self, ...)`` calls in methods of classes that are
    not configs (a runtime object updating itself, not a config copy)."""
    out: set[int] = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name not in classes:
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Call)
                    and _callee(node) == "replace"
                    and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == "self"
                ):
                    out.add(id(node))
    return out


def copies(path: Path, classes: set[str]) -> list[tuple[int, str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    params = _params(tree)
    setters = _runtime_self_replaces(tree, classes)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee(node)
            if not _builds_config(name, classes) or id(node) in setters:
                continue
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                base = _base(kw.value)
                if base is not None and base != "self":
                    found.append(
                        (node.lineno, "config", f"{name}({kw.arg}={base}.{_attr(kw.value)})")
                    )
                elif _param(kw.value) == kw.arg and kw.arg in params.get(id(node), ()):
                    found.append((node.lineno, "config", f"{name}({kw.arg}={kw.arg})"))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and _attr(value) == key.value
                    and _configish(_base(value))
                ):
                    found.append(
                        (node.lineno, "dict", f"{{{key.value!r}: {_base(value)}.{key.value}}}")
                    )
    return found


def main(argv: list[str]) -> int:
    totals = {"config": 0, "dict": 0}
    classes = _classes()
    for path in sorted(ROOT.rglob("*.py")):
        for line, kind, what in sorted(copies(path, classes)):
            totals[kind] += 1
            if "--list" in argv:
                print(f"{path.relative_to(ROOT.parent)}:{line}: {kind}: {what}")
    print(
        f"hand-copied config fields: {sum(totals.values())} "
        f"({totals['config']} into configs, {totals['dict']} into dicts)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
