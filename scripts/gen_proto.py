#!/usr/bin/env python3
"""Compile proto/sailor/v1/*.proto into the package that owns each file (`make proto`).

Each .proto file is compiled into exactly one package, so that no descriptor is registered twice
when several Sailor packages are imported in one process. The ownership table `OWNERS` below is
the single place that says where a file's generated code lives; adding a .proto file is a
one-line change there. Generated cross-file imports (`from sailor.v1 import job_pb2`) are
rewritten to the owning package (`from sailor_sim.proto import job_pb2`).

Usage:
    python scripts/gen_proto.py          # regenerate in place
    python scripts/gen_proto.py --check  # exit 1 listing stale files; write nothing

Requires grpcio-tools (in the workspace's dev dependency group).
"""

from __future__ import annotations

import argparse
import importlib.resources
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"

# .proto file (relative to proto/) -> folder (relative to the repo root) of its generated code.
# The folder must be packages/<distribution>/src/<python package path>.
OWNERS: dict[str, str] = {
    "sailor/v1/job.proto": "packages/sailor-sim/src/sailor_sim/proto",
    "sailor/v1/plan.proto": "packages/sailor-sim/src/sailor_sim/proto",
    "sailor/v1/estimate.proto": "packages/sailor-sim/src/sailor_sim/proto",
    "sailor/v1/planner.proto": "packages/sailor-planner/src/sailor_planner/proto",
    "sailor/v1/agent.proto": "packages/sailor-runtime/src/sailor_runtime/proto",
    "sailor/v1/controller.proto": "packages/sailor-runtime/src/sailor_runtime/proto",
}

INIT_TEMPLATE = '''"""Generated protobuf code for {protos}.

Do not edit: regenerate with `make proto` (scripts/gen_proto.py) from proto/.
"""
'''

GENERATED_RE = re.compile(r".*_pb2(_grpc)?\.pyi?$")
SERVICE_RE = re.compile(r"^\s*service\s+\w+", re.MULTILINE)
# `from sailor.v1 import job_pb2 as ...` (in _pb2.py, _pb2.pyi and _pb2_grpc.py)
IMPORT_RE = re.compile(r"^from sailor\.v1 import (\w+_pb2)\b", re.MULTILINE)
LEFTOVER_RE = re.compile(r"^\s*(from|import)\s+sailor\.v1\b", re.MULTILINE)


def python_package(folder: str) -> str:
    """`packages/sailor-sim/src/sailor_sim/proto` -> `sailor_sim.proto`."""
    parts = Path(folder).parts
    if len(parts) < 4 or parts[0] != "packages" or parts[2] != "src":
        raise SystemExit(f"OWNERS folder {folder!r} is not packages/<dist>/src/<package path>")
    return ".".join(parts[3:])


def module_stem(proto: str) -> str:
    """`sailor/v1/job.proto` -> `job_pb2`."""
    return Path(proto).stem + "_pb2"


def owner_of_module() -> dict[str, str]:
    """`job_pb2` -> `sailor_sim.proto` for every owned .proto file."""
    return {module_stem(p): python_package(folder) for p, folder in OWNERS.items()}


def has_service(proto: str) -> bool:
    return bool(SERVICE_RE.search((PROTO_ROOT / proto).read_text()))


def generated_modules() -> list[str]:
    """Fully qualified names of every generated Python module, e.g. `sailor_sim.proto.job_pb2`."""
    mods = []
    for proto, folder in OWNERS.items():
        pkg = python_package(folder)
        mods.append(f"{pkg}.{module_stem(proto)}")
        if has_service(proto):
            mods.append(f"{pkg}.{module_stem(proto)}_grpc")
    return mods


def check_table() -> None:
    found = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    missing = [p for p in found if p not in OWNERS]
    absent = [p for p in OWNERS if p not in found]
    if missing or absent:
        msg = []
        if missing:
            msg.append(f"no owner in scripts/gen_proto.py OWNERS for: {', '.join(missing)}")
        if absent:
            msg.append(f"OWNERS names files missing under proto/: {', '.join(absent)}")
        raise SystemExit("gen_proto: " + "; ".join(msg))


def compile_all(out: Path) -> None:
    from grpc_tools import protoc  # imported late: only needed to generate

    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(PROTO_ROOT / proto) for proto in sorted(OWNERS)),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"gen_proto: protoc failed with status {rc}")


def rewrite_imports(text: str, where: str) -> str:
    owners = owner_of_module()

    def repl(m: re.Match[str]) -> str:
        mod = m.group(1)
        if mod not in owners:
            raise SystemExit(f"gen_proto: {where} imports sailor.v1.{mod}, which has no owner")
        return f"from {owners[mod]} import {mod}"

    text = IMPORT_RE.sub(repl, text)
    if LEFTOVER_RE.search(text):
        raise SystemExit(f"gen_proto: {where} still imports sailor.v1 after rewriting")
    return text


def expected_files() -> dict[Path, str]:
    """Every generated file (absolute path) and its content."""
    files: dict[Path, str] = {}
    with tempfile.TemporaryDirectory(prefix="sailor-proto-") as tmp:
        out = Path(tmp)
        compile_all(out)
        by_folder: dict[str, list[str]] = {}
        for proto, folder in OWNERS.items():
            by_folder.setdefault(folder, []).append(proto)
            gen_dir = out / Path(proto).parent
            stem = module_stem(proto)
            names = [f"{stem}.py", f"{stem}.pyi"]
            if has_service(proto):
                names.append(f"{stem}_grpc.py")
            for name in names:
                src = gen_dir / name
                files[ROOT / folder / name] = rewrite_imports(src.read_text(), f"{proto} -> {name}")
        for folder, protos in by_folder.items():
            files[ROOT / folder / "__init__.py"] = INIT_TEMPLATE.format(
                protos=", ".join(sorted(protos))
            )
    return files


def stale(files: dict[Path, str]) -> tuple[list[Path], list[Path]]:
    """(files missing or different, generated-looking files that should not exist)."""
    changed = [p for p, text in files.items() if not p.is_file() or p.read_text() != text]
    folders = {p.parent for p in files}
    extra = sorted(
        p
        for folder in folders
        if folder.is_dir()
        for p in folder.iterdir()
        if GENERATED_RE.match(p.name) and p not in files
    )
    return sorted(changed), extra


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 listing stale generated files; write nothing"
    )
    args = parser.parse_args(argv)

    check_table()
    files = expected_files()
    changed, extra = stale(files)

    if args.check:
        if not changed and not extra:
            print(f"gen_proto: {len(files)} generated files are up to date")
            return 0
        for p in changed:
            print(f"stale: {rel(p)}", file=sys.stderr)
        for p in extra:
            print(f"unexpected: {rel(p)} (no .proto in OWNERS generates it)", file=sys.stderr)
        print("gen_proto: generated code is stale; run `make proto`", file=sys.stderr)
        return 1

    for p in changed:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[p])
        print(f"wrote {rel(p)}")
    for p in extra:
        p.unlink()
        print(f"removed {rel(p)}")
    if not changed and not extra:
        print(f"gen_proto: {len(files)} generated files already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
