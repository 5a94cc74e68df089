#!/usr/bin/env bash
# scripts/bench/titan.sh: the per-device conversion of a TorchTitan checkpoint with its
# optimizer state, paired with the conversion of the same weights alone. The sources (written
# by torch in the oracle on first use and kept in .bench/titan-2g, scripts/bench/make_titan.py):
# step-1, what torchtitan's CheckpointManager saves — 178 M float32 parameters at the top level
# with AdamW's exp_avg and exp_avg_sq in the flattened optimizer form, 2.0 GiB of tensors,
# beside lr_scheduler, dataloader and train_state — and model, the model's state dict alone
# (0.66 GiB). Both convert with `--to tpu --topology v5p-8 --format dcp` (fsdp=4, a file per
# device), alternately rep by rep (A then B on odd reps, B then A on even ones), each run
# after a sync and a warm read of its source, its output fsynced by ckpt. Prints a Markdown
# table: median seconds [min–max], GB/s of tensor bytes, peak RSS median [min–max], and the
# median [min–max] of the per-rep time ratios. REPS (default 5) reps.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
reps=${REPS:-5}
mkdir -p .bench
src=.bench/titan-2g
[ -d "$src/step-1" ] || scripts/oracle python scripts/bench/make_titan.py "/repo/$src" >&2
go build -o .bench/ckpt ./cmd/ckpt

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
stats() { sort -g | awk '{a[NR]=$1} END {printf "%s [%s–%s]", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tensor_bytes() { .bench/ckpt inspect --json "$1" | sed -n 's/.*"total_bytes": *\([0-9]*\).*/\1/p' | head -1; }

a_src=$src/step-1
b_src=$src/model
a_bytes=$(tensor_bytes "$a_src")
b_bytes=$(tensor_bytes "$b_src")
ta=() tb=() ra=() rb=() ratios=()
for i in $(seq "$reps"); do
  for which in $([ $((i % 2)) = 1 ] && echo "a b" || echo "b a"); do
    s=$([ "$which" = a ] && echo "$a_src" || echo "$b_src")
    rm -rf .bench/out-titan; sync; cat "$s"/* >/dev/null
    t0=$(now)
    /usr/bin/time -v -o .bench/run.time .bench/ckpt convert -q --to tpu --topology v5p-8 --format dcp "$s" .bench/out-titan
    t1=$(now)
    t=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
    if [ "$which" = a ]; then x=$t; ta+=("$t"); ra+=("$(rss .bench/run.time)"); else y=$t; tb+=("$t"); rb+=("$(rss .bench/run.time)"); fi
  done
  ratios+=("$(awk -v x="$x" -v y="$y" 'BEGIN{printf "%.2f", x/y}')")
done
rm -rf .bench/out-titan
gbps() { awk -v b="$1" -v s="$2" 'BEGIN{printf "%.2f", b/s/1e9}'; }
echo "| per-device conversion (--topology v5p-8, fsdp=4, dcp) | tensor bytes | seconds median [min–max] | GB/s | peak RSS MiB median [min–max] |"
echo "|---|---|---|---|---|"
echo "| TorchTitan step-1: weights + flattened AdamW state | $a_bytes | $(printf '%s\n' "${ta[@]}" | stats) | $(gbps "$a_bytes" "$(printf '%s\n' "${ta[@]}" | median)") | $(printf '%s\n' "${ra[@]}" | stats) |"
echo "| the same weights alone (model-only DCP) | $b_bytes | $(printf '%s\n' "${tb[@]}" | stats) | $(gbps "$b_bytes" "$(printf '%s\n' "${tb[@]}" | median)") | $(printf '%s\n' "${rb[@]}" | stats) |"
echo
echo "with optimizer / weights alone, per-rep time ratio: $(printf '%s\n' "${ratios[@]}" | stats) (tensor bytes $(awk -v a="$a_bytes" -v b="$b_bytes" 'BEGIN{printf "%.2f", a/b}')×)"
