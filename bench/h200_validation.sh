#!/usr/bin/env bash
# The H200 validation run quoted in the closing notes: every item writes under $OUT/r/, each with its own time
# limit, then everything is packed into $OUT/results.tgz (the device tool returns few files).
#   bash bench/h200_validation.sh validate peak gemm overhead      (first call)
#   bash bench/h200_validation.sh makeall ncu                      (second call)
# Needs the real case files: carried as .shared_data/data/npukernelbench (a copy of ../shared/data, git-ignored).
set -u
export PYTHONUNBUFFERED=1
export MFU_SHARED_DATA="$PWD/.shared_data/data" MFU_SHARED_DIR="$PWD/.shared_data"
export MFU_PEAK_CACHE_DIR="$OUT/r/peak_cache"
R="$OUT/r"; mkdir -p "$R"
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv > "$R/gpu.csv" 2>&1
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__)" >> "$R/gpu.csv"
for item in "$@"; do
  case "$item" in
    validate)
      log validate
      timeout 290 python3 bench/validate_bundled.py --out "$R/validate" --backend cuda --timeout-s 100 \
        --only 3_FusionAttention,2_FFN,npukernelbench/level3/1_BatchMatmul,10_LayerNorm,7_SparseVarlenAttention,5_MHABlock,6_GQAAttention,4_FFN,3_RMSNorm,2_Softmax,zoo/1_BatchMatmul \
        > "$R/validate.log" 2>&1; log "validate rc=$?"; rm -rf "$R/validate/work"/*/prof ;;
    peak)
      log peak; timeout 90 python3 bench/bench_peak_calib.py --out "$R/peak" > "$R/peak.log" 2>&1; log "peak rc=$?" ;;
    gemm)
      log gemm; P=$(ls "$R"/peak/*.json 2>/dev/null | grep -m1 peak_calib || true)
      timeout 80 python3 bench/bench_gemm_mfu.py --out "$R/gemm" > "$R/gemm.log" 2>&1; log "gemm rc=$?" ;;
    overhead)
      log overhead; timeout 100 python3 bench/bench_collector_overhead.py --out "$R/overhead/collector_overhead.json" \
        --work /tmp/mfu_ovh --backend cuda > "$R/overhead.log" 2>&1; log "overhead rc=$?" ;;
    makeall)
      for op in zoo/5_MHABlock npukernelbench/level4/2_FFN npukernelbench/level4/3_FusionAttention; do
        log "make all $op"
        timeout 170 make OP=$op WORK="$R/make/${op//\//__}" BACKEND=cuda all > "$R/make_${op//\//__}.log" 2>&1
        log "make $op rc=$?"; rm -rf "$R/make/${op//\//__}/prof"
      done ;;
    ncu)
      log ncu; timeout 240 python3 bench/ncu_vs_profiler.py --out "$R/ncu/ncu_vs_profiler.md" --work /tmp/mfu_ncu \
        --ops 5_MHABlock,zoo/1_BatchMatmul,zoo/4_FFN > "$R/ncu.log" 2>&1; log "ncu rc=$?" ;;
  esac
done
log done
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$R"
