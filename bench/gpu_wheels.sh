#!/usr/bin/env bash
# Build .whl/ for bench/gpu_session.sh: our four packages and the third-party wheels the device
# machines' image lacks (or holds at older versions), at uv.lock's versions, for CPython 3.12 on
# x86-64. What travels to the device machine is capped at 64 MiB (working tree + .whl), and
# polars' runtime wheel alone is 54 MB: its shared object ships with symbols, so it is stripped
# and its RECORD entry rewritten (2026-11-26: 61 MB in all, ~4.5 MB of tree beside it).
#
#   bash bench/gpu_wheels.sh        (then: run `bash bench/gpu_session.sh ...` with carry [".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-$(command -v uv || echo "$HOME/.local/bin/uv")}
rm -rf .whl && mkdir .whl
"$UV" build --all-packages --wheel -o .whl >/dev/null
pins=()
for p in polars polars-runtime-32 protobuf grpcio grpcio-health-checking grpcio-reflection typer \
    pydantic pydantic-core annotated-types typing-inspection; do
    v=$(grep -A1 "^name = \"$p\"$" uv.lock | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
    [[ -n $v ]] || { echo "error: $p is not in uv.lock" >&2; exit 1; }
    pins+=("$p==$v")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pins[@]}"
whl=$(ls .whl/polars_runtime_32-*.whl)
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$OLDPWD/$whl" && so=$(ls _polars_runtime_32/*.so) && strip --strip-unneeded "$so" &&
    python3 - "$so" <<'PY'
import base64, glob, hashlib, sys
so = sys.argv[1]
data = open(so, "rb").read()
digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = glob.glob("*.dist-info/RECORD")[0]
rows = [f"{so},sha256={digest},{len(data)}" if r.startswith(so + ",") else r
        for r in open(record).read().splitlines()]
open(record, "w").write("\n".join(rows) + "\n")
PY
    rm "$OLDPWD/$whl" && zip -q -9 -r "$OLDPWD/$whl" .)
rm -rf "$tmp"
du -cb .whl/*.whl | tail -1 | awk '{printf "%.1f MB of wheels in .whl/\n", $1 / 1e6}'
