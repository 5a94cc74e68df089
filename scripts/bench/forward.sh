#!/usr/bin/env bash
# scripts/bench/forward.sh: `ckpt forward` against transformers on CPU, paired in one run, on
# a Qwen3-0.6B-shaped random model (hidden 1024, 28 layers, intermediate 3072, vocab 151936,
# tied embeddings, bfloat16 safetensors, 1.19 GB; written by torch in the oracle on first use
# and kept in .bench/). Each round runs, one after another on a warm page cache:
#   ckpt forward --out (float32 precision, the default), ckpt forward --precision tpu --out,
#   transformers from_pretrained + forward in bfloat16, and in float32 (eager attention,
#   OMP_NUM_THREADS=2, logits written as ckpt writes them),
# each timed as a whole command (process start to logits written) with its peak RSS. The
# machine is shared, so the candidates alternate within each round and the table gives the
# median of ROUNDS rounds (default 5) with the range. Then `go test -bench` reports the
# matmul kernels' GFLOP/s against the machine's peak. Prints Markdown for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
rounds=${ROUNDS:-5}
model=.bench/qwen3-0.6b
mkdir -p .bench
[ -f "$model/model.safetensors" ] || scripts/oracle python scripts/bench/forward_make_qwen3.py "/repo/$model" >&2
go build -o .bench/ckpt ./cmd/ckpt
tokens=$(seq -s, 1000 1000 32000) # 32 tokens
bytes=$(stat -c %s "$model/model.safetensors")

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
stats() { sort -g | awk '{a[NR]=$1} END {printf "%.2f (%.2f–%.2f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
maxof() { sort -g | tail -1; }

names=("ckpt forward (float32)" "ckpt forward --precision tpu" "transformers bf16" "transformers float32")
cmds=(
  ".bench/ckpt forward $model --tokens $tokens --out .bench/logits-ckpt.safetensors --force"
  ".bench/ckpt forward $model --tokens $tokens --precision tpu --out .bench/logits-tpu.safetensors --force"
  "scripts/oracle python scripts/bench/forward_transformers.py /repo/$model bfloat16 $tokens /repo/.bench/logits-bf16.safetensors"
  "scripts/oracle python scripts/bench/forward_transformers.py /repo/$model float32 $tokens /repo/.bench/logits-f32.safetensors"
)
declare -A times rsss
for r in $(seq "$rounds"); do
  for i in "${!cmds[@]}"; do
    sync
    cat "$model/model.safetensors" >/dev/null
    t0=$(now)
    /usr/bin/time -v -o .bench/run.time ${cmds[$i]} >/dev/null 2>.bench/run.err || { cat .bench/run.err >&2; exit 1; }
    t1=$(now)
    times[$i]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}') "
    rsss[$i]+="$(rss .bench/run.time) "
  done
  echo "round $r done" >&2
done

echo "| run | seconds, median (range) | peak RSS MiB (max) |"
echo "|---|---|---|"
for i in "${!cmds[@]}"; do
  echo "| ${names[$i]} | $(echo "${times[$i]}" | tr ' ' '\n' | grep . | stats) | $(echo "${rsss[$i]}" | tr ' ' '\n' | grep . | maxof) |"
done
echo
echo "checkpoint: $(awk -v b="$bytes" 'BEGIN{printf "%.0f MiB", b/1048576}') ($bytes bytes); uptime: $(uptime | sed 's/.*load/load/')"
echo
echo "Kernel throughput, one goroutine (go test -bench; 2·m·n·k FLOP per product), per wall-clock"
echo "second and per second of CPU time (what the kernel does while it has a core):"
echo
echo "| kernel / weights / m×n×k | GFLOP/s | GFLOP/cpu-s |"
echo "|---|---|---|"
go test -run XXX -bench 'BenchmarkMatMul/(avx512|avx2)/' -benchtime 1s ./verify/forward/kernel/ | awk '/GFLOP/ {
  w = c = ""; for (i = 2; i < NF; i++) { if ($(i+1) == "GFLOP/s") w = $i; if ($(i+1) == "GFLOP/cpu-s") c = $i }
  n = $1; sub(/^BenchmarkMatMul\//, "", n); sub(/-[0-9]+$/, "", n); printf "| %s | %s | %s |\n", n, w, c }'
echo
echo "Logits of the last round against transformers float32 (max abs, mean abs, top-1 agreement):"
echo
echo "| logits | max abs | mean abs | top-1 agree |"
echo "|---|---|---|---|"
scripts/oracle python scripts/bench/forward_compare.py /repo/.bench/logits-f32.safetensors \
  /repo/.bench/logits-ckpt.safetensors /repo/.bench/logits-tpu.safetensors /repo/.bench/logits-bf16.safetensors
