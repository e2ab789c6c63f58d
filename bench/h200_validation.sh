#!/usr/bin/env bash
# The H200 validation run quoted in the closing notes. Each item writes under $OUT/r/ with its own time limit,
# capped so that the whole run ends before DEADLINE_S; everything is then packed into $OUT/results.tgz (the device
# tool returns few files). Items run in the order given:
#   bash bench/h200_validation.sh validate peak gemm overhead makeall ncu
# Needs the real case files: carried as .shared_data/data/npukernelbench (a copy of ../shared/data, git-ignored).
set -u
export PYTHONUNBUFFERED=1
export MFU_SHARED_DATA="$PWD/.shared_data/data" MFU_SHARED_DIR="$PWD/.shared_data"
export MFU_PEAK_CACHE_DIR="$OUT/r/peak_cache"
DEADLINE_S=${DEADLINE_S:-560}
VALIDATE_ONLY=${VALIDATE_ONLY:-}
R="$OUT/r"; mkdir -p "$R"
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# run LIMIT_S NAME CMD...: at most LIMIT_S, and never past the deadline
run() {
  local limit=$1 name=$2; shift 2
  local left=$(( DEADLINE_S - ($(date +%s) - T0) ))
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then log "$name skipped: deadline"; return; fi
  log "$name (limit ${limit}s)"
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  log "$name rc=$?"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv > "$R/gpu.csv" 2>&1
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__)" >> "$R/gpu.csv"
for item in "$@"; do
  case "$item" in
    validate)
      run 290 validate python3 bench/validate_bundled.py --out "$R/validate" --backend cuda --timeout-s 100 \
        ${VALIDATE_ONLY:+--only "$VALIDATE_ONLY"}
      rm -rf "$R/validate/work"/*/prof ;;
    peak) run 150 peak python3 bench/bench_peak_calib.py --out "$R/peak" ;;
    gemm) run 80 gemm python3 bench/bench_gemm_mfu.py --out "$R/gemm" ;;
    overhead)
      run 100 overhead python3 bench/bench_collector_overhead.py --out "$R/overhead/collector_overhead.json" \
        --work /tmp/mfu_ovh --backend cuda ;;
    makeall)
      for op in zoo/5_MHABlock npukernelbench/level4/2_FFN npukernelbench/level4/3_FusionAttention; do
        w="$R/make/${op//\//__}"
        run 110 "make_${op//\//__}" make OP=$op WORK="$w" BACKEND=cuda all
        rm -rf "$w/prof"
      done ;;
    ncu)
      run 150 ncu python3 bench/ncu_vs_profiler.py --out "$R/ncu/ncu_vs_profiler.md" --work /tmp/mfu_ncu \
        --ops 5_MHABlock,zoo/1_BatchMatmul,zoo/4_FFN ;;
  esac
done
log done
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$R"
