#!/usr/bin/env bash
# scripts/bench/writepath.sh: the durable write paths side by side on this machine's disk
# (issue 14): cp + sync of the 2 GiB benchmark checkpoint, and ckpt converting it to
# safetensors with the write path chosen by measurement (default), forced through the page
# cache (CKPT_DIRECT_IO=off: kernel copies, early writeback) and forced direct
# (CKPT_DIRECT_IO=on). The four run in a rotating order rep by rep, each after a sync and a
# warm read of the source. Prints, per path, the median and range of REPS runs (default 5)
# and the median of the per-rep ratios to cp + sync.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
reps=${REPS:-5}
mkdir -p .bench
src=.bench/llama-2g.pt
[ -f "$src" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$src" >&2
go build -o .bench/ckpt ./cmd/ckpt
paths=(cp default off on)
run() {
  case $1 in
  cp) cp "$src" .bench/out.cp && sync .bench/out.cp ;;
  default) .bench/ckpt convert --to tpu --format safetensors "$src" .bench/out.safetensors >/dev/null 2>&1 ;;
  *) CKPT_DIRECT_IO=$1 .bench/ckpt convert --to tpu --format safetensors "$src" .bench/out.safetensors >/dev/null 2>&1 ;;
  esac
}
declare -A times
for i in $(seq "$reps"); do
  for j in 0 1 2 3; do
    p=${paths[$(((i + j) % 4))]}
    rm -rf .bench/out*; sync; cat "$src" >/dev/null
    t0=$(date +%s.%N); run "$p"; t1=$(date +%s.%N)
    times[$p,$i]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
  done
done
rm -rf .bench/out*
echo "| path | median s | range s | median ratio to cp + sync |"
echo "|---|---|---|---|"
for p in "${paths[@]}"; do
  ts=() rs=()
  for i in $(seq "$reps"); do ts+=("${times[$p,$i]}"); rs+=("$(awk -v a="${times[$p,$i]}" -v b="${times[cp,$i]}" 'BEGIN{print a/b}')"); done
  printf '%s\n' "${ts[@]}" | sort -g | awk -v p="$p" -v r="$(printf '%s\n' "${rs[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" \
    '{a[NR]=$1} END {printf "| %s | %.2f | %.2f–%.2f | %.2f |\n", p, a[int((NR+1)/2)], a[1], a[NR], r}'
done
