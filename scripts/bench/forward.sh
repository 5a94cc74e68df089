#!/usr/bin/env bash
# scripts/bench/forward.sh: `ckpt forward` against transformers on CPU, paired in one run, on
# two random models written by torch in the oracle on first use and kept in .bench/: a
# Qwen3-0.6B-shaped one (hidden 1024, 28 layers, intermediate 3072, vocab 151936, tied
# embeddings, bfloat16 safetensors, 1.19 GB) and a Pythia-410M-shaped GPT-NeoX (hidden 1024,
# 24 layers, intermediate 4096, vocab 50304, fused per-head QKV, partial rotary, LayerNorms,
# parallel residual; 0.81 GB). Each round runs, one after another on a warm page cache, for
# each model: ckpt forward --out (float32 precision, the default), ckpt forward --precision
# tpu --out, transformers from_pretrained + forward in bfloat16, and in float32 (eager
# attention, OMP_NUM_THREADS=2, logits written as ckpt writes them), each timed as a whole
# command (process start to logits written) with its peak RSS. The machine is shared, so the
# candidates alternate within each round and the table gives the median of ROUNDS rounds
# (default 5) with the range, and each model's ratio of transformers bf16 to ckpt forward
# per round (median and range of the paired ratios). Then `go test -bench` reports the
# matmul kernels' GFLOP/s against the machine's peak. Prints Markdown for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
rounds=${ROUNDS:-5}
mkdir -p .bench
[ -f .bench/qwen3-0.6b/model.safetensors ] || scripts/oracle python scripts/bench/forward_make_qwen3.py /repo/.bench/qwen3-0.6b >&2
[ -f .bench/neox-410m/model.safetensors ] || scripts/oracle python scripts/bench/forward_make_neox.py /repo/.bench/neox-410m >&2
go build -o .bench/ckpt ./cmd/ckpt
tokens=$(seq -s, 1000 1000 32000) # 32 tokens

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
stats() { sort -g | awk '{a[NR]=$1} END {printf "%.2f (%.2f–%.2f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
maxof() { sort -g | tail -1; }

models=(qwen3-0.6b neox-410m)
names=("ckpt forward (float32)" "ckpt forward --precision tpu" "transformers bf16" "transformers float32")
declare -A times rsss
for r in $(seq "$rounds"); do
  for model in "${models[@]}"; do
    m=.bench/$model
    cmds=(
      ".bench/ckpt forward $m --tokens $tokens --out .bench/$model-logits-ckpt.safetensors --force"
      ".bench/ckpt forward $m --tokens $tokens --precision tpu --out .bench/$model-logits-tpu.safetensors --force"
      "scripts/oracle python scripts/bench/forward_transformers.py /repo/$m bfloat16 $tokens /repo/.bench/$model-logits-bf16.safetensors"
      "scripts/oracle python scripts/bench/forward_transformers.py /repo/$m float32 $tokens /repo/.bench/$model-logits-f32.safetensors"
    )
    for i in "${!cmds[@]}"; do
      sync
      cat "$m/model.safetensors" >/dev/null
      t0=$(now)
      /usr/bin/time -v -o .bench/run.time ${cmds[$i]} >/dev/null 2>.bench/run.err || { cat .bench/run.err >&2; exit 1; }
      t1=$(now)
      times[$model,$i]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}') "
      rsss[$model,$i]+="$(rss .bench/run.time) "
    done
    echo "round $r, $model done" >&2
  done
done

for model in "${models[@]}"; do
  bytes=$(stat -c %s ".bench/$model/model.safetensors")
  echo
  echo "$model: checkpoint $(awk -v b="$bytes" 'BEGIN{printf "%.0f MiB", b/1048576}') ($bytes bytes)"
  echo
  echo "| run | seconds, median (range) | peak RSS MiB (max) |"
  echo "|---|---|---|"
  for i in "${!names[@]}"; do
    echo "| ${names[$i]} | $(echo "${times[$model,$i]}" | tr ' ' '\n' | grep . | stats) | $(echo "${rsss[$model,$i]}" | tr ' ' '\n' | grep . | maxof) |"
  done
  # Paired ratios: transformers bf16 over ckpt forward (float32), round by round.
  echo
  echo "transformers bf16 / ckpt forward (float32), paired per round: $(paste -d' ' <(echo "${times[$model,2]}" | tr ' ' '\n' | grep .) <(echo "${times[$model,0]}" | tr ' ' '\n' | grep .) | awk '{print $1/$2}' | stats)×"
  echo
  echo "Logits of the last round against transformers float32 (max abs, mean abs, top-1 agreement):"
  echo
  echo "| logits | max abs | mean abs | top-1 agree |"
  echo "|---|---|---|---|"
  scripts/oracle python scripts/bench/forward_compare.py /repo/.bench/$model-logits-f32.safetensors \
    /repo/.bench/$model-logits-ckpt.safetensors /repo/.bench/$model-logits-tpu.safetensors /repo/.bench/$model-logits-bf16.safetensors
done
echo
echo "uptime: $(uptime | sed 's/.*load/load/')"
echo
echo "Kernel throughput, one goroutine (go test -bench; 2·m·n·k FLOP per product), per wall-clock"
echo "second and per second of CPU time (what the kernel does while it has a core):"
echo
echo "| kernel / weights / m×n×k | GFLOP/s | GFLOP/cpu-s |"
echo "|---|---|---|"
go test -run XXX -bench 'BenchmarkMatMul/(avx512|avx2)/' -benchtime 1s ./verify/forward/kernel/ | awk '/GFLOP/ {
  w = c = ""; for (i = 2; i < NF; i++) { if ($(i+1) == "GFLOP/s") w = $i; if ($(i+1) == "GFLOP/cpu-s") c = $i }
  n = $1; sub(/^BenchmarkMatMul\//, "", n); sub(/-[0-9]+$/, "", n); printf "| %s | %s | %s |\n", n, w, c }'
