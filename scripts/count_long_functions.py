"""Count the long functions of ``src/`` (issue 28's "functions over 60 / 100 lines").

Method: every ``def`` (functions, methods, nested functions) of every ``.py`` file under
``src/``, measured from its ``def`` line to its last line (``ast``'s ``end_lineno``),
docstring and comments included, decorators not. Functions of the compiled kernel
(``.pyx``) are counted apart, from the ``def``/``cdef``/``cpdef`` line to the last line
indented under it, since ``ast`` cannot read Cython.

    python scripts/count_long_functions.py            # the counts
    python scripts/count_long_functions.py --list 20  # and the 20 longest
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
PYX_DEF = re.compile(r"^(\s*)(?:c?p?def)\s+(?:[\w\[\]:,. *]+\s+)?(\w+)\s*\(")


def python_functions(path: Path) -> list[tuple[int, str]]:
    """``(lines, "file:line name")`` of every function of a Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT)
    return [
        (node.end_lineno - node.lineno + 1, f"{rel}:{node.lineno} {node.name}")
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def cython_functions(path: Path) -> list[tuple[int, str]]:
    """The same for a Cython file: a function ends at its last line indented under it
    (a signature's closing ``):`` at the ``def``'s indentation does not end it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(ROOT)
    out = []
    for i, line in enumerate(lines):
        m = PYX_DEF.match(line)
        if not m:
            continue
        indent, last = len(m.group(1)), i
        for j in range(i + 1, len(lines)):
            text = lines[j]
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            if len(text) - len(text.lstrip()) <= indent and not text.lstrip().startswith(")"):
                break
            last = j
        out.append((last - i + 1, f"{rel}:{i + 1} {m.group(2)}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", type=int, default=0, metavar="N", help="show the N longest")
    args = ap.parse_args()
    py = [f for p in sorted(ROOT.rglob("*.py")) for f in python_functions(p)]
    pyx = [f for p in sorted(ROOT.rglob("*.pyx")) for f in cython_functions(p)]
    for name, rows in (("Python", py), ("Cython", pyx)):
        over60 = sum(n > 60 for n, _ in rows)
        over100 = sum(n > 100 for n, _ in rows)
        print(f"{name}: {len(rows)} functions, {over60} over 60 lines, {over100} over 100")
    for n, where in sorted(py + pyx, key=lambda r: (-r[0], r[1]))[: args.list]:
        print(f"{n:5d}  {where}")


if __name__ == "__main__":
    main()
