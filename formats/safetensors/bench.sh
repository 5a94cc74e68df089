#!/usr/bin/env bash
# bench.sh: read throughput and peak RSS of formats/safetensors against `cat`, on a 2 GiB file.
#
#   formats/safetensors/bench.sh [DIR]
#
# Writes DIR/bench-2g.safetensors (default DIR: ${TMPDIR:-/tmp}/ckpt-safetensors-bench; kept
# for reruns) with ckpt's own writer, warms the page cache with one `cat`, then times a warm
# `cat FILE > /dev/null` and BenchmarkRead on the same file (Open, then every tensor through
# WriteTo into a writer that reads one byte per 4 KiB page), both under /usr/bin/time -v.
# Nothing is dropped from the page cache: both runs read from memory.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-${TMPDIR:-/tmp}/ckpt-safetensors-bench}
file=$dir/bench-2g.safetensors
size=$((2 << 30))
mkdir -p "$dir"
cd "$repo"

if [ ! -f "$file" ]; then
  echo "writing $file" >&2
  CKPT_BENCH_WRITE=$file CKPT_BENCH_SIZE=$size go test -count=1 -run '^TestWriteBenchFile$' ./formats/safetensors >&2
fi
go test -c -o "$dir/safetensors.test" ./formats/safetensors

# field NAME LOG: a value from a /usr/bin/time -v log
field() { sed -n "s/^[[:space:]]*$1: //p" "$2"; }

cat "$file" >/dev/null
t0=$(date +%s%N)
/usr/bin/time -v -o "$dir/cat.time" cat "$file" >/dev/null
t1=$(date +%s%N)
cat_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')
cat_rss=$(field 'Maximum resident set size (kbytes)' "$dir/cat.time")

CKPT_BENCH_SAFETENSORS=$file /usr/bin/time -v -o "$dir/go.time" \
  "$dir/safetensors.test" -test.run '^$' -test.bench '^BenchmarkRead$' -test.benchtime 5x >"$dir/go.bench"
go_ns=$(awk '/^BenchmarkRead/ { print $3 }' "$dir/go.bench")
go_anon=$(awk '/^BenchmarkRead/ { for (i = 1; i < NF; i++) if ($(i + 1) == "anon-MiB") print $i }' "$dir/go.bench")
go_rss=$(field 'Maximum resident set size (kbytes)' "$dir/go.time")

bytes=$(stat -c %s "$file")
awk -v b="$bytes" -v cs="$cat_s" -v crss="$cat_rss" -v gns="$go_ns" -v grss="$go_rss" -v ganon="$go_anon" 'BEGIN {
  gs = gns / 1e9
  printf "file:            %.2f GiB\n", b / 2^30
  printf "cat (warm):      %.3f s  %7.2f GB/s  peak RSS %7.1f MiB\n", cs, b / cs / 1e9, crss / 1024
  printf "ckpt Open+read:  %.3f s  %7.2f GB/s  peak RSS %7.1f MiB, of which anonymous %.1f MiB (the rest is mapped page cache)\n", gs, b / gs / 1e9, grss / 1024, ganon
  printf "ratio ckpt/cat:  %.2fx the time of cat\n", gs / cs
}'
