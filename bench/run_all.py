"""Run every benchmark script in bench/ (`make bench`).

A benchmark is a `bench/*.py` file (other than this one) that defines a top-level `main`
function; it is run as `python bench/<name>.py` in its own process, in name order. Files without
`main` (helpers) are skipped. Exits non-zero when any benchmark fails or none is found (a
bench run that measured nothing must not pass).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def has_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


def main() -> int:
    scripts = [
        p
        for p in sorted(BENCH.glob("*.py"))
        if p.name != Path(__file__).name and not p.name.startswith("_") and has_main(p)
    ]
    if not scripts:
        print("bench: no benchmark scripts in bench/", file=sys.stderr)
        return 1
    failed = []
    for script in scripts:
        print(f"=== bench/{script.name}", flush=True)
        start = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script)], cwd=BENCH.parent)
        print(f"=== bench/{script.name}: exit {rc} in {time.perf_counter() - start:.1f} s")
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
