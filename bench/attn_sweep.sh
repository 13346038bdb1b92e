#!/usr/bin/env bash
# Sweep the tensor-core FlashAttention-2 kernel's tilings on the GPU machine.
#
#   bash bench/attn_sweep.sh            # from the repository root, dist/ carried
#   CONFIGS="bm64_bn64_w4_s2 bm128_bn64_w8_s2" SHAPES="b4s2048d128" bash bench/attn_sweep.sh
#   BACKENDS="llmc cudnn" CONFIGS=bm64_bn64_w4_s2 bash bench/attn_sweep.sh   # llmc vs cuDNN per shape
#
# For every (tile, shape) it runs an attention-only function through
#   LLMC_ATTN_CONFIG=<tile> llmc-run F.mlir --attention=llmc --check=gpu-f32 --bench --iters=$ITERS
# and, with BACKENDS containing cudnn, once per shape through
#   llmc-run F.mlir --attention=cudnn --check=gpu-f32 --bench --iters=$ITERS
# (row "cudnn"; check FALLBACK when cuDNN was absent or had no plan and llmc's
# kernel ran, with llmc-run's warning below the row).
# and prints one table row: tile, shape, median end-to-end time (the function is
# one attention launch under CUDA graph replay), TFLOP/s and the relative error
# against the unfused float32 run. Causal FLOPs = 4*B*Hq*D*(visible (q,k) pairs),
# non-causal 4*B*Hq*Sq*Skv*D (FlashAttention's convention).
# Writes $OUT/attn_sweep.tsv (or ./gpu-out) and the per-run logs' tails on failure.
# The default tile rule is chooseAttentionTile in lib/Compiler/LowerToExecutable.cpp.
set -uo pipefail
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
export PATH="$PWD/dist/bin:$PATH"
export LD_LIBRARY_PATH="$PWD/dist/lib:${LD_LIBRARY_PATH:-}"
export LLMC_CACHE_DIR="${LLMC_CACHE_DIR:-/tmp/llmc-cache}"
ITERS="${ITERS:-20}"
BACKENDS="${BACKENDS:-llmc}"
# Tiles (AttentionTileName form). bm64_bn64_w4_s1_gh is the pre-sweep kernel
# (64x64, single-buffered K/V, heads-fastest grid); bm64_bn64_w4_s2 the current default.
CONFIGS="${CONFIGS:-bm64_bn64_w4_s1_gh bm64_bn64_w4_s1 bm64_bn64_w4_s2_gh bm64_bn64_w4_s2 bm64_bn32_w4_s2 bm64_bn128_w4_s2 bm128_bn32_w4_s1 bm128_bn64_w4_s2 bm128_bn32_w8_s2 bm128_bn64_w8_s1 bm128_bn64_w8_s2 bm128_bn128_w8_s2}"
# name:B:S:Hq:Hkv:D:causal
ALL_SHAPES="b4s2048d128:4:2048:32:32:128:1 b1s8192d128:1:8192:32:32:128:1 b4s2048d64:4:2048:32:32:64:1 b4s2048gqa8:4:2048:32:8:128:1"
SHAPES="${SHAPES:-b4s2048d128 b1s8192d128 b4s2048d64 b4s2048gqa8}"

DIR="$(mktemp -d)"
TSV="$OUT/attn_sweep.tsv"
printf 'tile\tshape\tms\tTFLOP/s\trel_err\tcheck\n' > "$TSV"
printf '%-22s %-12s %9s %9s %10s %s\n' tile shape ms TFLOP/s rel_err check
t_start=$(date +%s)
for spec in $ALL_SHAPES; do
  IFS=: read -r name B S H HKV D CAUSAL <<< "$spec"
  case " $SHAPES " in *" $name "*) ;; *) continue ;; esac
  T="tensor<${B}x${S}x${H}x${D}xbf16>"
  TK="tensor<${B}x${S}x${HKV}x${D}xbf16>"
  ATTR=""; [ "$CAUSAL" = 1 ] && ATTR=" {causal}"
  cat > "$DIR/$name.mlir" <<EOF
func.func @attn_$name(%q: $T, %k: $TK, %v: $TK) -> $T {
  %o = llm.attention %q, %k, %v$ATTR : $T, $TK, $TK
  return %o : $T
}
EOF
  if [ "$CAUSAL" = 1 ]; then pairs=$(( S * (S + 1) / 2 )); else pairs=$(( S * S )); fi
  flops=$(( 4 * B * H * D * pairs ))
  runs=""
  for backend in $BACKENDS; do
    if [ "$backend" = llmc ]; then for cfg in $CONFIGS; do runs="$runs llmc:$cfg"; done
    else runs="$runs $backend:-"; fi
  done
  for run in $runs; do
    backend="${run%%:*}"; cfg="${run#*:}"
    [ "$backend" != llmc ] && cfg="$backend"
    log="$DIR/$name.$cfg.log"
    if [ "$backend" = llmc ]; then
      LLMC_ATTN_CONFIG="$cfg" llmc-run "$DIR/$name.mlir" --attention=llmc --check=gpu-f32 --bench --iters="$ITERS" > "$log" 2>&1
    else
      llmc-run "$DIR/$name.mlir" --attention="$backend" --check=gpu-f32 --bench --iters="$ITERS" > "$log" 2>&1
    fi
    rc=$?
    ms=$(sed -n 's/^end to end: median \([0-9.]*\) ms.*/\1/p' "$log")
    err=$(sed -n 's/.*relative error \([0-9.e+-]*\) .*/\1/p' "$log" | head -1)
    verdict=$(grep -o 'PASS$\|FAIL$' "$log" | head -1)
    [ $rc -ne 0 ] && verdict="${verdict:-ERROR}(rc=$rc)"
    fallback=$(grep '^warning: --attention=' "$log" | head -3)
    [ -n "$fallback" ] && verdict="FALLBACK"
    tf="-"
    [ -n "$ms" ] && tf=$(awk -v f="$flops" -v ms="$ms" 'BEGIN { printf "%.1f", f / (ms * 1e-3) / 1e12 }')
    printf '%-22s %-12s %9s %9s %10s %s\n' "$cfg" "$name" "${ms:--}" "$tf" "${err:--}" "$verdict"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$name" "${ms:--}" "$tf" "${err:--}" "$verdict" >> "$TSV"
    if [ $rc -ne 0 ]; then tail -5 "$log" | sed 's/^/    /'; fi
    [ -n "$fallback" ] && printf '%s\n' "$fallback" | sed 's/^/    /'
    grep '^attention: ' "$log" | head -3 | sed 's/^/    /' 
  done
done
echo "sweep took $(( $(date +%s) - t_start )) s; table in $TSV"
# Best tile (or backend) per shape (highest TFLOP/s among rows that passed the check).
awk -F'\t' 'NR > 1 && $6 == "PASS" && $4 != "-" { if ($4 + 0 > best[$2] + 0) { best[$2] = $4; tile[$2] = $1 } }
  END { for (s in best) printf "best %-12s %-22s %s TFLOP/s\n", s, tile[s], best[s] }' "$TSV" | sort
