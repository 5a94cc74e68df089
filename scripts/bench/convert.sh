#!/usr/bin/env bash
# scripts/bench/convert.sh: ckpt convert against cp and the Python path, on the same machine
# in one run, for a 2 GiB Llama-shaped bf16 torch.save checkpoint (written by torch in the
# oracle on first use and kept in .bench/). Every run reads a page-cache-warm source and
# ends with the output fsynced (cp is timed with and without a following sync of its output).
# Prints a Markdown table for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
mkdir -p .bench
src=.bench/llama-2g.pt
[ -f "$src" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$src" >&2
go build -o .bench/ckpt ./cmd/ckpt
bytes=$(stat -c %s "$src")
cat "$src" >/dev/null

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
row() { awk -v n="$1" -v s="$2" -v b="$bytes" -v r="$3" 'BEGIN { printf "| %s | %.2f | %.2f | %s |\n", n, s, b / s / 1e9, r }'; }

echo "| run | seconds | GB/s | peak RSS MiB |"
echo "|---|---|---|---|"
# The Python rows: first the work alone (after import torch), then the whole command as a
# user runs it (interpreter start and import included), comparable with the ckpt command.
rm -f .bench/out*
t0=$(now); /usr/bin/time -v -o .bench/cp.time cp "$src" .bench/out.cp; t1=$(now)
row "cp" "$(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}')" "$(rss .bench/cp.time)"
rm -f .bench/out.cp
t0=$(now); cp "$src" .bench/out.cp && sync .bench/out.cp; t1=$(now)
cp_sync=$(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}')
row "cp + sync" "$cp_sync" "–"
rm -f .bench/out*
for fmt in safetensors torch; do
  ext=$([ $fmt = safetensors ] && echo .safetensors || echo .pt)
  cat "$src" >/dev/null
  t0=$(now); /usr/bin/time -v -o .bench/ckpt.time .bench/ckpt convert --to tpu --format $fmt "$src" ".bench/out$ext" >/dev/null; t1=$(now)
  row "ckpt convert → $fmt" "$(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}')" "$(rss .bench/ckpt.time)"
  rm -rf .bench/out*
  cat "$src" >/dev/null
  what="torch.load(mmap) + $([ $fmt = safetensors ] && echo save_file || echo torch.save)"
  t0=$(now); res=$(scripts/oracle python scripts/bench/python_path.py "/repo/$src" "/repo/.bench/out$ext" $fmt | tail -1); t1=$(now)
  prss=$(echo "$res" | sed 's/.*"peak_rss_mib": \([0-9.]*\).*/\1/' | awk '{printf "%.0f", $1}')
  row "python $what (work only)" "$(echo "$res" | sed 's/.*"seconds": \([0-9.]*\).*/\1/')" "$prss"
  row "python $what (whole command)" "$(awk -v a=$t0 -v b=$t1 'BEGIN{print b-a}')" "$prss"
  rm -rf .bench/out*
done
