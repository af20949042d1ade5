#!/usr/bin/env bash
# Everything this project checks on a GPU machine, in one bounded command.
#
#   bash bench/gpu_session.sh [SECONDS] [STEPS]      (default 560 s; STEPS: a comma list, default all)
#
# For a machine with PyTorch + CUDA but no package index (the device tool's machines; build .whl/
# first with `bash bench/gpu_wheels.sh`): the
# wheels under .whl/ (our four packages, `uv build --all-packages --wheel -o .whl`, and the
# third-party ones the image lacks: polars, protobuf, grpcio*, typer + pydantic; see bench/gpu_wheels.sh) are installed into the
# python3 that holds torch. Each step runs under `timeout`, bounded by what is left of SECONDS,
# and logs to $OUT/<step>.log (at most 8 files come back: the logs, summary.txt and one tarball
# of the runs' JSON). A failed step does not stop the next; summary.txt lists each step's exit code.
#
# Steps, most important first:
#   smoke      bench/gpu_smoke.py at its defaults (tiny-llama): the NCCL code path end to end
#   tests      the tests that need CUDA, and the engine's unit tests, on this GPU
#   run        `make demo`'s run on this GPU: Shakespeare text, profile, plan, train bf16, eval
#   smoke-big  bench/gpu_smoke.py on OPT-350M, gbs 8, seq 2048: prediction vs measurement
#   none       the same with recompute none (the prediction's compute and memory without recompute)
#   selective  the same with recompute selective (that option's term on a GPU)
#   overhead   bench/engine_overhead.py, 1 rank: our engine against plain DDP on one GPU
set -u
BUDGET=${1:-560}
ONLY=${2:-all}
OUT=${OUT:-/tmp/sailor-gpu-session}
mkdir -p "$OUT" "$OUT/runs"
START=$SECONDS
SUMMARY="$OUT/summary.txt"
export PYTHONUNBUFFERED=1

log() { echo "$*" | tee -a "$SUMMARY"; }

install() {
    nvidia-smi -L 2>&1 | tee -a "$SUMMARY"
    if ! python3 -c "import sailor_runtime, polars" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            .whl/*.whl >"$OUT/install.log" 2>&1 || { log "install failed"; cat "$OUT/install.log"; exit 1; }
    fi
    python3 - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import torch, polars, grpc, google.protobuf, sailor_runtime
print(f"torch {torch.__version__}, cuda {torch.version.cuda}, nccl {torch.cuda.nccl.version()}, "
      f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, polars {polars.__version__}, "
      f"grpc {grpc.__version__}, protobuf {google.protobuf.__version__}")
from sailor_profiler.devices import local_gpu_type
print("catalog type:", local_gpu_type(0))
EOF
}

step() {  # step NAME SECONDS COMMAND...
    local name=$1 want=$2
    shift 2
    case ",$ONLY," in *",$name,"* | ",all,") ;; *) return ;; esac
    local left=$((BUDGET - (SECONDS - START) - 5))
    local limit=$((want < left ? want : left))
    if ((limit < 20)); then
        log "$name: skipped (${left}s left)"
        return
    fi
    local t0=$SECONDS
    # what else holds the CPU as the step starts: the profiler's launch-bound layers cost host
    # time, and one smoke-big profile ran 12-24 % slow right after the `run` step (2026-11-27)
    log "$name: load $(cut -d' ' -f1-3 /proc/loadavg); python processes left: $(pgrep -c python)"
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    log "$name: rc $rc in $((SECONDS - t0))s (limit ${limit}s)"
    tail -n 25 "$OUT/$name.log"
}

install
R="$OUT/runs"
step smoke 90 python3 bench/gpu_smoke.py --out "$R/smoke"
step tests 100 python3 -m pytest -q -p no:cacheprovider \
    packages/sailor-runtime/tests/test_backend.py \
    packages/sailor-runtime/tests/test_engine_units.py \
    packages/sailor-runtime/tests/test_engine_options.py \
    packages/sailor-profiler/tests/test_profiler_devices.py \
    packages/sailor-profiler/tests/test_activation_memory.py \
    packages/sailor-profiler/tests/test_timing.py \
    packages/sailor-runtime/tests/test_head_memory.py \
    packages/sailor-runtime/tests/test_profiled_optimizer.py \
    packages/sailor-runtime/tests/test_local_gpus.py
GPU=$(python3 -c "from sailor_profiler.devices import local_gpu_type; print(local_gpu_type(0))" 2>/dev/null)
step run 150 bash -c "sailor data prepare --out '$R/text' --vocab-size 1024 &&
    sailor run --local --workers 1 --gpu-types '${GPU:-H100-80}' \
    --model examples/shakespeare-demo/config.json --data '$R/text' --eval-every 10 --lr 3e-3 \
    --warmup-steps 5 --precision bf16 --gbs 16 --seq 64 --steps 60 --checkpoint-every 10 \
    --run-dir '$R/run' --json '$R/run/summary.json' --timeout 140"
step smoke-big 150 python3 bench/gpu_smoke.py --model OPT-350M --gbs 8 --seq 2048 --out "$R/big"
# one step per option: together they took more than one step's 200 s (2026-11-27)
step none 130 python3 bench/gpu_smoke.py --model OPT-350M --gbs 8 --seq 2048 --recompute none \
    --out "$R/none"
step selective 130 python3 bench/gpu_smoke.py --model OPT-350M --gbs 8 --seq 2048 \
    --recompute selective --out "$R/selective"
step overhead 100 python3 bench/engine_overhead.py --ranks 1 --model GPT-1.7B --gbs 4 --seq 1024 \
    --steps 8 --trials 2
# the runs' small files (predictions, metrics, summaries, rank logs), not checkpoints
(cd "$R" && find . -name '*.json' -o -name '*.jsonl' -o -name '*.log' -o -name '*.txt' |
    tar -czf "$OUT/runs.tar.gz" -T - 2>/dev/null)
rm -rf "$R"
log "total $((SECONDS - START))s"
