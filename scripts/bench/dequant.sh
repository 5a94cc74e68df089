#!/usr/bin/env bash
# scripts/bench/dequant.sh: ckpt's dequantizers against the reference code on the same machine
# in one run: an 8192x8192 block-FP8 weight (128x128 float32 scales) and gpt-oss-120b-sized
# MXFP4 experts (32 x 2880 x 2880), written once with torch in the oracle into .bench/dequant.
# The reference is transformers 5.12.1 (Fp8Dequantize._dequantize_one, convert_moe_packed_tensors)
# on torch 2.14.1 with one thread per core, best of 3 (MXFP4: 2) calls on tensors already in
# memory; each call returns a new tensor (allocating it is part of the reference's API). ckpt
# is quant.Group.Dequantize read whole into a reused buffer by BenchmarkDequantize with one
# goroutine per core, best of 3 runs of 5, its codes mapped from the page-cache-warm file.
# Then the whole `ckpt convert --dequantize` command (read, dequantize, write the folder,
# hashing for the manifest as it writes, fsync) is timed, and `ckpt inspect --hash` of its output proves
# every tensor bit-identical to the reference's.
# Prints a Markdown table for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
dir=.bench/dequant
[ -f "$dir/mxfp4/model.safetensors" ] || scripts/oracle python scripts/bench/dequant_ref.py make "/repo/$dir" >&2
go build -o .bench/ckpt ./cmd/ckpt
cat "$dir"/*/model.safetensors >/dev/null
ref=$(scripts/oracle python scripts/bench/dequant_ref.py time "/repo/$dir")
ours=$(for m in fp8 mxfp4; do
  CKPT_BENCH_DEQUANT="$PWD/$dir/$m" go test ./quant -run '^$' -bench '^BenchmarkDequantize$' -benchtime 5x -count 3
done | awk '/^BenchmarkDequantize/ { for (i = 1; i <= NF; i++) if ($(i+1) == "Gelem/s" && $i > best[$1]) best[$1] = $i }
  END { for (k in best) print k, best[k] }')

declare -A hashes
for m in fp8 mxfp4; do
  for dt in bfloat16 float32; do
    [ $m = mxfp4 ] && [ $dt = float32 ] && continue
    rm -rf "$dir/out"
    t0=$(date +%s.%N)
    .bench/ckpt convert --to tpu --format safetensors --dequantize --dtype $dt "$dir/$m" "$dir/out/" >/dev/null
    t1=$(date +%s.%N)
    h=$(.bench/ckpt inspect --json --hash "$dir/out" | sed -n 's/.*"sha256": "\([0-9a-f]*\)".*/\1/p')
    hashes["$m $dt"]="$h $(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}')"
  done
done
rm -rf "$dir/out"

echo "| tensor | elements | reference s | reference Gelem/s | ckpt Gelem/s | speed-up | \`ckpt convert --dequantize\` s | bit-identical |"
echo "|---|---|---|---|---|---|---|---|"
echo "$ref" | while read -r line; do
  c=$(echo "$line" | sed 's/.*"case": "\([^"]*\)".*/\1/')
  n=$(echo "$line" | sed 's/.*"elements": \([0-9]*\).*/\1/')
  s=$(echo "$line" | sed 's/.*"seconds": \([0-9.e-]*\).*/\1/')
  h=$(echo "$line" | sed 's/.*"sha256": "\([0-9a-f]*\)".*/\1/')
  m=${c%% *}; m=${m%-block}; dt=${c##* }
  g=$(echo "$ours" | awk -v k="BenchmarkDequantize/${c%% *}/$dt" 'index($1, k) == 1 { print $2 }')
  read -r oh ot <<<"${hashes["$m $dt"]}"
  same=$([ "$oh" = "$h" ] && echo yes || echo "NO")
  awk -v c="$c" -v n="$n" -v s="$s" -v g="$g" -v t="$ot" -v same="$same" 'BEGIN {
    r = n / s / 1e9; printf "| %s | %d | %.3f | %.3f | %.2f | %.0f× | %.2f | %s |\n", c, n, s, r, g, g / r, t, same }'
done
