#!/usr/bin/env bash
# The Triton-Ascend-style ModelNew of tests/fixtures/ascend_style through verify_op.py (and the collector) on a CUDA
# GPU, unchanged (issue 12 item 1): torch_npu host code, persistent grids from get_device_limit()["cube_core_num"],
# a float SCALE.to(...) argument and an autotuned kernel (really autotuned here: compiled Triton benchmarks both
# configs). Also the tl.make_block_ptr variant, which compiled Triton still runs.
# Cases: the fixture's two small ones plus two larger fp16 ones (written to $OUT/cases.json).
# Run from the repository root on the GPU machine:  bash bench/verify_ascend_style_cuda.sh
# Also prints what triton.runtime.driver.active.utils.get_device_properties() answers under the compat layer.
# Writes $OUT/ascend_style/{env.txt, <variant>/verify.json, <variant>/verify.log, ascend/performance.json, summary.txt}
set -u
export PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the results folder}"
R="$OUT/ascend_style"; mkdir -p "$R"
FIX=tests/fixtures/ascend_style
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__)"; } > "$R/env.txt" 2>&1
cp "$FIX/scaled_mm_softmax.json" "$R/cases.json"
python3 - "$R/cases.json" <<'PY'
import json, sys
with open(sys.argv[1], "a") as f:
    for m, k, n in ((4096, 1024, 1024), (2048, 4096, 2048)):
        f.write(json.dumps({"inputs": [
            {"name": "x", "type": "tensor", "required": True, "dtype": "float16", "shape": [m, k]},
            {"name": "w", "type": "tensor", "required": True, "dtype": "float16", "shape": [k, n]}]}) + "\n")
PY
rc_all=0
for variant in ascend block_ptr; do
  impl="$FIX/scaled_mm_softmax_ascend.py"; [ "$variant" = block_ptr ] && impl="$FIX/scaled_mm_softmax_block_ptr.py"
  W="/tmp/mfu_ascend_style_$variant"; rm -rf "$W"
  python3 scripts/prepare_op_dir.py --ref "$FIX/scaled_mm_softmax.py" --cases "$R/cases.json" --impl "$impl" \
    --dst "$W" > "$R/prepare_$variant.log" 2>&1
  mkdir -p "$R/$variant"
  timeout 300 python3 scripts/verify_op.py --op-dir "$W" --backend cuda -o "$R/$variant/verify.json" \
    > "$R/$variant/verify.log" 2>&1
  rc=$?; echo "$variant verify rc=$rc" >> "$R/summary.txt"; [ $rc -ne 0 ] && rc_all=1
  tail -n 8 "$R/$variant/verify.log" >> "$R/summary.txt"
done
# the collector on the largest case (real autotuning in the priming call, never in a measured iteration)
timeout 240 python3 scripts/ops_profiling/msprof_perf_summary.py --op-dir /tmp/mfu_ascend_style_ascend \
  --output-dir "$R/ascend" --backend cuda --cases 2,3 --warmup 5 --repeats 10 > "$R/ascend/collect.log" 2>&1
echo "collect rc=$?" >> "$R/summary.txt"
python3 - "$R" >> "$R/summary.txt" 2>&1 <<'PY'
import json, sys
r = sys.argv[1]
for v in ("ascend", "block_ptr"):
    d = json.load(open(f"{r}/{v}/verify.json"))
    print(v, "compat:", {k: d["device"]["compat"].get(k) for k in ("cube_core_num", "vector_core_num", "core_count_source")})
    for c in d["cases"]:
        print(f"  case {c['case']} {c['shape']} {c['status']} err={c.get('max_norm_err')} {c.get('reason') or ''}")
p = json.load(open(f"{r}/ascend/performance.json"))
for c in p["per_case"]:
    print(f"collect case {c['case']} {c['shape']}: asc_us={c['asc_us']} sequence={c.get('sequence')} error={c['asc_error']}")
PY
# triton-ascend's other core-count idiom (vllm-ascend, sgl-kernel-npu): driver.active.utils.get_device_properties()
python3 - >> "$R/summary.txt" 2>&1 <<'PY'
import sys
sys.path.insert(0, "scripts")
from mfulib.run import compat
rep = compat.install("cuda:0")
import torch, triton
p = triton.runtime.driver.active.utils.get_device_properties(torch.npu.current_device())
print("driver idiom:", rep["patched"][-1], {k: p.get(k) for k in ("num_aicore", "num_vectorcore", "multiprocessor_count")})
PY
cat "$R/summary.txt"
exit $rc_all
