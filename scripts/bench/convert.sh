#!/usr/bin/env bash
# scripts/bench/convert.sh: ckpt convert against cp and the Python path, on the same machine
# in one run, for a 2 GiB Llama-shaped bf16 torch.save checkpoint (written by torch in the
# oracle on first use and kept in .bench/). Before every run: sync (no dirty pages left from
# the previous one) and a warm read of the source. Every run ends with its output fsynced
# (cp is timed with and without a following sync); dd with direct I/O shows what the disk
# itself allows for writing the same bytes durably. Each row is the median of REPS runs
# (default 3). Prints a Markdown table for BENCHMARKS.md; then, after a blank line, a second
# one for the cast of a float32 checkpoint to bfloat16 (--dtype bfloat16): ckpt and the Python
# path with .to(torch.bfloat16), on an 8-layer float32 file of 2.17 GB (also kept in .bench/).
# The first table ends with a DCP folder written whole and one sharded per device (fsdp=8),
# run alternately, and the median ratio of their times.
#
# CKPT_B=BINARY (another build of ckpt, e.g. of an earlier commit) instead runs an A/B: this
# build and BINARY paired rep by rep on every conversion of the tables (safetensors, torch,
# dcp whole and per device, the bfloat16 cast), with the median of the per-rep ratios B/A.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
reps=${REPS:-3}
mkdir -p .bench
src=.bench/llama-2g.pt
f32=.bench/llama-f32.pt
[ -f "$src" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$src" >&2
[ -f "$f32" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$f32" 8 float32 >&2
CGO_ENABLED=0 go build -trimpath -o .bench/ckpt ./cmd/ckpt
bytes=$(stat -c %s "$src")

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
prepare() { rm -rf .bench/out*; sync; cat "$src" >/dev/null; }
row() { awk -v n="$1" -v s="$2" -v b="$bytes" -v r="$3" 'BEGIN { printf "| %s | %.2f | %.2f | %s |\n", n, s, b / s / 1e9, r }'; }

# measure NAME CMD...: median wall time of CMD over reps, peak RSS of the last run.
measure() {
  local name=$1; shift
  local times=()
  for _ in $(seq "$reps"); do
    prepare
    local t0 t1
    t0=$(now); /usr/bin/time -v -o .bench/run.time "$@" >/dev/null; t1=$(now)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
  done
  row "$name" "$(printf '%s\n' "${times[@]}" | median)" "$(rss .bench/run.time)"
}

header() { echo "| run | seconds | GB/s | peak RSS MiB |"; echo "|---|---|---|---|"; }

# convert_rows [DTYPE]: ckpt convert and the Python path on $src, casting every floating tensor
# to DTYPE when given (ckpt --dtype DTYPE; Python v.to(torch.DTYPE) between load and save).
convert_rows() {
  local dtype=${1:-} opt=() cast=""
  [ -z "$dtype" ] || { opt=(--dtype "$dtype"); cast=" + .to($dtype)"; }
  measure "ckpt convert --to tpu${dtype:+ --dtype $dtype} → safetensors" .bench/ckpt convert --to tpu "${opt[@]}" --format safetensors "$src" .bench/out.safetensors
  measure "ckpt convert --to tpu${dtype:+ --dtype $dtype} → torch" .bench/ckpt convert --to tpu "${opt[@]}" --format torch "$src" .bench/out.pt
  # The Python path: the work alone (timed inside Python after import torch), then the whole
  # command as a user runs it (interpreter start and import included), comparable with ckpt's.
  local fmt ext what work whole prss res t0 t1
  for fmt in safetensors torch; do
    ext=$([ $fmt = safetensors ] && echo .safetensors || echo .pt)
    what="torch.load(mmap)$cast + $([ $fmt = safetensors ] && echo save_file || echo torch.save)"
    work=() whole=() prss=0
    for _ in $(seq "$reps"); do
      prepare
      t0=$(now); res=$(scripts/oracle python scripts/bench/python_path.py "/repo/$src" "/repo/.bench/out$ext" $fmt ${dtype:+"$dtype"} | tail -1); t1=$(now)
      work+=("$(echo "$res" | sed 's/.*"seconds": \([0-9.]*\).*/\1/')")
      whole+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
      prss=$(echo "$res" | sed 's/.*"peak_rss_mib": \([0-9.]*\).*/\1/' | awk '{printf "%.0f", $1}')
    done
    row "python $what (work only)" "$(printf '%s\n' "${work[@]}" | median)" "$prss"
    row "python $what (whole command)" "$(printf '%s\n' "${whole[@]}" | median)" "$prss"
  done
}

# paired NAME_A NAME_B -- CMD_A -- CMD_B: both commands alternately, rep by rep (A then B on
# odd reps, B then A on even ones), so that both see the same machine; a row each (median
# time, peak RSS of the last run) and the median of the per-rep time ratios B/A.
paired() {
  local na=$1 nb=$2; shift 2
  local a=() b=()
  while [ "$1" != "--" ]; do a+=("$1"); shift; done; shift
  b=("$@")
  local ta=() tb=() ratios=() t0 t1 x y
  for i in $(seq "$reps"); do
    for which in $([ $((i % 2)) = 1 ] && echo "a b" || echo "b a"); do
      prepare
      t0=$(now)
      if [ "$which" = a ]; then /usr/bin/time -v -o .bench/run-a.time "${a[@]}" >/dev/null; else /usr/bin/time -v -o .bench/run-b.time "${b[@]}" >/dev/null; fi
      t1=$(now)
      if [ "$which" = a ]; then x=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'); else y=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'); fi
    done
    ta+=("$x"); tb+=("$y"); ratios+=("$(awk -v x="$x" -v y="$y" 'BEGIN{print y/x}')")
  done
  row "$na" "$(printf '%s\n' "${ta[@]}" | median)" "$(rss .bench/run-a.time)"
  row "$nb" "$(printf '%s\n' "${tb[@]}" | median)" "$(rss .bench/run-b.time)"
  paired_ratio=$(printf '%s\n' "${ratios[@]}" | median)
}

if [ -n "${CKPT_B:-}" ]; then
  ab() {
    local name=$1; shift
    paired "A: $name" "B: $name" .bench/ckpt "$@" -- "$CKPT_B" "$@"
    echo "| B/A, median of the paired runs | $paired_ratio | | |"
  }
  header
  ab "→ safetensors" convert --to tpu --format safetensors "$src" .bench/out.safetensors
  ab "→ torch" convert --to tpu --format torch "$src" .bench/out.pt
  ab "→ dcp" convert --to tpu --format dcp "$src" .bench/out.dcp
  ab "--topology v6e-8 → dcp, a file per device" convert --to tpu --topology v6e-8 --format dcp "$src" .bench/out.dcp
  src=$f32
  bytes=$(stat -c %s "$src")
  ab "--dtype bfloat16 → safetensors (float32 source)" convert --to tpu --dtype bfloat16 --format safetensors "$src" .bench/out.safetensors
  rm -rf .bench/out*
  exit 0
fi

header
measure "cp" cp "$src" .bench/out.cp
# Issue 14: a durable conversion is never slower than cp + sync of the same bytes. Paired
# rep by rep with the conversion that copies the most bytes unchanged.
paired "cp + sync" "ckpt convert --to tpu → safetensors (paired with cp + sync)" \
  sh -c "cp '$src' .bench/out.cp && sync .bench/out.cp" -- \
  .bench/ckpt convert --to tpu --format safetensors "$src" .bench/out.safetensors
cp_ratio=$paired_ratio
# The disk's floor for this output: the same bytes copied with direct I/O and fsynced.
measure "dd bs=8M oflag=direct conv=fsync" dd if="$src" of=.bench/out.dd bs=8M oflag=direct conv=fsync status=none
convert_rows
# Per device (issue 11): the same checkpoint as a DCP folder, whole in one file, and sharded
# with FSDP over the 8 devices of a v6e-8 (one __R_0.distcp per device), paired.
paired "ckpt convert --to tpu → dcp" "ckpt convert --to tpu --topology v6e-8 (fsdp=8) → dcp, a file per device" \
  .bench/ckpt convert --to tpu --format dcp "$src" .bench/out.dcp -- \
  .bench/ckpt convert --to tpu --topology v6e-8 --format dcp "$src" .bench/out.dcp
echo
echo "ckpt → safetensors / cp + sync, median of the paired runs: $cp_ratio"
echo "sharded / whole, median of the paired runs: $paired_ratio"

# float32 → bfloat16. GB/s here is the source's size (the float32 file read) over the time;
# the output is about half as many bytes.
src=$f32
bytes=$(stat -c %s "$src")
echo
header
convert_rows bfloat16
rm -rf .bench/out*
