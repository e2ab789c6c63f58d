#!/usr/bin/env bash
# PMU on the H200 (issue 14): the MHA block through the whole pipeline with Nsight Compute counters, then the HTML
# report. Run on the device machine from the repository root:
#   bash bench/pmu_h200.sh
# Writes $OUT/pmu_h200.tgz holding pmu_h200/: performance.json, mfu_decompose.json, mfu_decompose.png, report.html,
# peak.json, the raw ncu CSVs of every measured case (case<N>_<impl>_ncu.csv = ncu's stdout, --page raw), the ncu
# probe verdict (ncu_probe.json), the GPU tests of tests/test_ncu_pmu.py (test_ncu_pmu.log: the real ncu pass on a
# tiny operator), gpu.txt (nvidia-smi, torch/triton, ncu --version) and the make logs.
# Knobs: OP (default zoo/5_MHABlock), PMU_ARGS (collector flags, default "--pmu ncu"), LIMIT_ALL_S (default 360),
# BACKEND (default cuda; BACKEND=cpu PMU_ARGS="--pmu auto" dry-runs the script on a CPU machine), WORK.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export PYTHONUNBUFFERED=1
OP=${OP:-zoo/5_MHABlock}
PMU_ARGS=${PMU_ARGS:---pmu ncu}
LIMIT_ALL_S=${LIMIT_ALL_S:-360}
R="$OUT/pmu_h200"; mkdir -p "$R"
WORK="${WORK:-/tmp/mfu_pmu_h200/work/$OP}"
export MFU_PEAK_CACHE_DIR="$R/peak_cache"
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/steps.log"; }
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1
  echo "ncu on PATH: $(command -v ncu || echo none)"; ls -d /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>&1
  ncu --version 2>&1 | tail -2
} > "$R/gpu.txt"
log "ncu probe"
( cd scripts && timeout 90 python3 -c "import json; from mfulib.backends.cuda import NcuPmu; p = NcuPmu(); \
v = p.probe(); print(json.dumps(dict(v, metrics=p.metrics, dropped=p.dropped), indent=1))" ) > "$R/ncu_probe.json" 2>&1
log "probe: $(tr -d '\n' < "$R/ncu_probe.json" | head -c 300)"
log "tests/test_ncu_pmu.py on the GPU (the real ncu pass on a tiny operator)"
timeout 100 python3 -m pytest -q -rs -k real tests/test_ncu_pmu.py > "$R/test_ncu_pmu.log" 2>&1
log "test_ncu_pmu rc=$? ($(tail -1 "$R/test_ncu_pmu.log"))"
log "make all ($OP, COLLECT_ARGS=$PMU_ARGS, limit ${LIMIT_ALL_S}s)"
timeout "$LIMIT_ALL_S" make OP="$OP" BACKEND="${BACKEND:-cuda}" WORK="$WORK" COLLECT_ARGS="$PMU_ARGS" all > "$R/make_all.log" 2>&1
log "make all rc=$?"
timeout 60 make OP="$OP" BACKEND="${BACKEND:-cuda}" WORK="$WORK" report > "$R/make_report.log" 2>&1
log "make report rc=$?"
for f in performance.json mfu_decompose.json mfu_decompose.png report.html peak.json verify.json flops_check.json; do
  [ -f "$WORK/$f" ] && cp "$WORK/$f" "$R/"
done
if [ -d "$WORK/prof" ]; then
  for d in "$WORK"/prof/case*; do
    [ -f "$d/ncu/ncu.csv" ] && cp "$d/ncu/ncu.csv" "$R/$(basename "$d")_ncu.csv"
  done
fi
python3 - "$R" <<'PY' >> "$R/steps.log" 2>&1
import json, os, sys
r = sys.argv[1]
p = os.path.join(r, "performance.json")
if os.path.exists(p):
    rep = json.load(open(p))
    print("pmu_collection:", json.dumps(rep.get("pmu_collection")))
    for c in rep["per_case"]:
        print("case", c["case"], "asc_us", c.get("asc_us"), "pmu_source", c.get("pmu_source"),
              "pmu_unavailable", c.get("pmu_unavailable"))
        for k, v in (c.get("pmu") or {}).items():
            print("   ", k[:60], json.dumps(v))
PY
rm -rf "$R/peak_cache"
tar czf "$OUT/pmu_h200.tgz" -C "$OUT" pmu_h200 && log "wrote $OUT/pmu_h200.tgz"
true
