#!/usr/bin/env bash
# scripts/bench/hash.sh: `ckpt inspect --hash` (SHA-256 of every tensor) against
# `openssl dgst -sha256` of the same file, paired in one run, on the 2 GiB benchmark
# checkpoint (.bench/llama-2g.pt, made by scripts/bench/convert.sh's make_llama.py on first
# use). Each run starts with the file warm in the page cache. Prints a Markdown table of
# medians (and ranges) over REPS runs (default 5) with peak RSS.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
reps=${REPS:-5}
mkdir -p .bench
src=.bench/llama-2g.pt
[ -f "$src" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$src" >&2
go build -o .bench/ckpt ./cmd/ckpt
bytes=$(stat -c %s "$src")
cat "$src" >/dev/null

# one NAME CMD...: time and peak RSS of one run, appended to .bench/hash.NAME.
one() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o .bench/hash.one "$@" >/dev/null
  cat .bench/hash.one >>".bench/hash.$name"
}
rm -f .bench/hash.*
for _ in $(seq "$reps"); do
  one openssl openssl dgst -sha256 "$src"
  one ckpt .bench/ckpt inspect --hash --json "$src"
done
echo "| run | seconds, median (range) | GB/s | peak RSS MiB |"
echo "|---|---|---|---|"
for name in openssl ckpt; do
  sort -g ".bench/hash.$name" | awk -v n="$name" -v b="$bytes" '
    { t[NR]=$1; r[NR]=$2 } END {
      m=t[int((NR+1)/2)]; rs=0; for (i in r) if (r[i]>rs) rs=r[i];
      label = (n=="ckpt") ? "ckpt inspect --hash --json" : "openssl dgst -sha256";
      printf "| %s | %.2f (%.2f-%.2f) | %.2f | %.0f |\n", label, m, t[1], t[NR], b/m/1e9, rs/1024 }'
done
