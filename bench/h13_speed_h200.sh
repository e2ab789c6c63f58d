#!/usr/bin/env bash
# Issue 13 (speed) on the H200, one device call: the GPU tests of the device-side input draw, then the tool-overhead
# table (bench/bench_tool_overhead.py: per step wall / host CPU / device-busy, cold and warm Triton cache, plus one
# `make all` per operator from an empty work dir with a cold peak cache and the warm Triton cache - the issue's
# target, <= 60 s each). Everything lands in $OUT (5 files):
#   gpu_env.txt  gpu_tests.log  bench.log  tool_overhead.json  tool_overhead.md
#   bash bench/h13_speed_h200.sh                     # ~6-8 min
#   BUDGET_S=300 bash bench/h13_speed_h200.sh        # start no new run after 300 s (the default is 400; the call stays under 600 s)
#   MFU_HOST_DRAW=1 bash bench/h13_speed_h200.sh     # the same table with every input drawn on the host (before)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h13_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  nproc; command -v flock || echo "no flock: make all runs its steps one at a time"; git log --oneline -1 ; } \
  > "$OUT/gpu_env.txt" 2>&1
timeout 60 python3 -m pytest -q -s tests/gpu/test_input_draw_cuda.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?" >> "$OUT/gpu_tests.log"
timeout 520 python3 bench/bench_tool_overhead.py --backend cuda --modes cold,warm --all-runs warm \
  --budget-s "${BUDGET_S:-400}" --out "$OUT/tool_overhead.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/bench.log"
cat "$OUT/tool_overhead.md" 2>/dev/null || tail -40 "$OUT/bench.log"
