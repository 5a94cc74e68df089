#!/usr/bin/env bash
# scripts/bench/bucket.sh: ckpt convert of the 2 GiB benchmark checkpoint (.bench/llama-2g.pt,
# made as scripts/bench/convert.sh makes it) from a GCS emulator on loopback
# (scripts/bench/bucketserver: fake-gcs-server, objects streamed from disk) to a local file
# and to an S3 server on loopback (gofakes3 whose multipart uploads are hashed and
# discarded, see bucketserver's discarding: fake-gcs-server re-hashes the whole object at
# every chunk of a resumable upload, which makes uploading gigabytes to it quadratic, and
# gofakes3's own backend keeps and copies every part; both measure the emulator, not
# ckpt), paired rep by rep with the same conversion local → local and with the two floors —
# the object read in 8 MiB ranged GETs through the same client, 2 in flight, bytes
# discarded (scripts/bench/rangeget), and the same bytes uploaded to the same S3 server by
# the same client as one multipart upload (scripts/bench/putobject) — so that all see the
# same (shared, loaded) machine. Each row: median seconds, [min–max], GB/s of the median,
# peak RSS median [min–max], CPU seconds (user+system) median, and the CPU seconds the
# emulators' process used meanwhile (median; it shares the 2 cores). REPS (default 3) runs each.
# With .bench/llama-1g.pt (make_llama.py with 8 layers) present, the peak RSS of GCS → local
# and GCS → S3 for it too: RSS against size.
# The `--select` of one layer is a --drop of everything else (the flat file has no
# `model` sub-tree): the bytes the server sent for it, against the object's size.
# CKPT_B=path/to/another/ckpt (a build of another commit) adds its GCS → local and GCS → S3
# runs to every rep, against the same servers: an A/B paired rep by rep.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
reps=${REPS:-3}
mkdir -p .bench
src=.bench/llama-2g.pt
[ -f "$src" ] || scripts/oracle python scripts/bench/make_llama.py "/repo/$src" >&2
CGO_ENABLED=0 go build -trimpath -o .bench/ckpt ./cmd/ckpt
# The bench programs are their own module (scripts/bench/go.mod).
(cd scripts/bench && for p in bucketserver rangeget putobject; do CGO_ENABLED=0 go build -trimpath -o "../../.bench/$p" "./$p"; done)
bytes=$(stat -c %s "$src")
small=.bench/llama-1g.pt
puts=(-put "$src=gs://bench/llama-2g.pt")
[ -f "$small" ] && puts+=(-put "$small=gs://bench/llama-1g.pt")

rm -rf .bench/gcs .bench/gcs.addr
.bench/bucketserver -root .bench/gcs "${puts[@]}" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1200); do [ -s .bench/gcs.addr ] && break; kill -0 $server || exit 1; sleep 1; done
read -r STORAGE_EMULATOR_HOST AWS_ENDPOINT_URL_S3 <.bench/gcs.addr || true
export STORAGE_EMULATOR_HOST AWS_ENDPOINT_URL_S3 AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1

now() { date +%s.%N; }
rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.0f", $1/1024}'; }
stats() { sort -g | awk '{a[NR]=$1} END {printf "%s %s %s\n", a[int((NR+1)/2)], a[1], a[NR]}'; }
run() { # run NAME CMD...: time CMD once (output removed first), appending to .bench/NAME.times
  local name=$1; shift
  rm -rf .bench/out*; sync
  local t0 t1
  local s0 s1
  s0=$(servercpu)
  t0=$(now); /usr/bin/time -v -o ".bench/$name.time" "$@" >/dev/null; t1=$(now)
  s1=$(servercpu)
  awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}' >>".bench/$name.times"
  awk -v a="$s0" -v b="$s1" -v hz="$(getconf CLK_TCK)" 'BEGIN{print (b-a)/hz}' >>".bench/$name.scpu"
  rss ".bench/$name.time" >>".bench/$name.rss"; echo >>".bench/$name.rss"
  cpu ".bench/$name.time" >>".bench/$name.cpu"
}
servercpu() { awk '{print $14 + $15}' /proc/$server/stat; } # the emulators' user + system ticks
cpu() { awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$1"; }
row() { # row LABEL NAME
  read -r med lo hi < <(stats <".bench/$2.times")
  read -r rmed rlo rhi < <(stats <".bench/$2.rss")
  read -r cmed _ _ < <(stats <".bench/$2.cpu")
  read -r smed _ _ < <(stats <".bench/$2.scpu")
  awk -v n="$1" -v s="$med" -v lo="$lo" -v hi="$hi" -v b="$bytes" -v r="$rmed" -v rlo="$rlo" -v rhi="$rhi" -v c="$cmed" -v sc="$smed" \
    'BEGIN { printf "| %s | %.2f [%.2f–%.2f] | %.2f | %d [%d–%d] | %.1f | %.1f |\n", n, s, lo, hi, b / s / 1e9, r, rlo, rhi, c, sc }'
}

rm -f .bench/*.times .bench/*.rss .bench/*.cpu .bench/*.scpu
# One untimed conversion of each kind first: the emulator has just handed gigabytes of heap
# back to the system, and on a VM the first page-cache writes into such memory cost a host
# fault per page (local → local took 8-15 s with 13 CPU-seconds right after the emulator
# started, 2 s a minute later).
for s in "$src" gs://bench/llama-2g.pt; do
  rm -rf .bench/out*; .bench/ckpt convert -q --to tpu --format safetensors "$s" .bench/out.safetensors
done
if [ -n "${CKPT_B:-}" ]; then rm -rf .bench/out*; "$CKPT_B" convert -q --to tpu --format safetensors gs://bench/llama-2g.pt .bench/out.safetensors; fi
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq "$reps"); do
  cat "$src" >/dev/null
  run local   .bench/ckpt convert -q --to tpu --format safetensors "$src" .bench/out.safetensors
  run gcs2loc .bench/ckpt convert -q --to tpu --format safetensors gs://bench/llama-2g.pt .bench/out.safetensors
  run gcs2s3 .bench/ckpt convert -q --force --to tpu --format safetensors gs://bench/llama-2g.pt s3://bench/out/llama.safetensors
  run readfloor .bench/rangeget -p 2 gs://bench/llama-2g.pt
  run putfloor .bench/putobject "$src" s3://bench/floor/llama-2g.pt
  if [ -n "${CKPT_B:-}" ]; then
    run bgcs2loc "$CKPT_B" convert -q --to tpu --format safetensors gs://bench/llama-2g.pt .bench/out.safetensors
    run bgcs2s3 "$CKPT_B" convert -q --force --to tpu --format safetensors gs://bench/llama-2g.pt s3://bench/out/llama.safetensors
  fi
done
echo "load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| run (2.11 GB bf16 torch.save → safetensors, $reps reps, paired) | seconds median [range] | GB/s | peak RSS MiB median [range] | CPU s | emulators' CPU s |"
echo "|---|---|---|---|---|---|"
row "local → local" local
row "GCS emulator → local" gcs2loc
row "GCS emulator → S3 server" gcs2s3
row "floor: ranged GETs of the object, bytes dropped (rangeget -p 2)" readfloor
row "floor: the file uploaded, nothing else (putobject)" putfloor
if [ -n "${CKPT_B:-}" ]; then
  row "B ($CKPT_B): GCS emulator → local" bgcs2loc
  row "B ($CKPT_B): GCS emulator → S3 server" bgcs2s3
fi
ratio() { paste .bench/local.times ".bench/$1.times" | awk '{print $2/$1}' | stats; } # per rep
read -r rl rllo rlhi < <(ratio gcs2loc)
read -r rs rslo rshi < <(ratio gcs2s3)
printf "\nmedian of the per-rep time ratios to local → local: GCS → local %.2f× [%.2f–%.2f], GCS → S3 %.2f× [%.2f–%.2f]\n" "$rl" "$rllo" "$rlhi" "$rs" "$rslo" "$rshi"
if [ -n "${CKPT_B:-}" ]; then
  ab() { paste ".bench/b$1.times" ".bench/$1.times" | awk '{print $2/$1}' | stats; } # this build's time / B's, per rep
  read -r al allo alhi < <(ab gcs2loc)
  read -r as aslo ashi < <(ab gcs2s3)
  printf "median of the per-rep time ratios of this build to B: GCS → local %.2f× [%.2f–%.2f], GCS → S3 %.2f× [%.2f–%.2f]\n" "$al" "$allo" "$alhi" "$as" "$aslo" "$ashi"
fi

if [ -f "$small" ]; then
  for to in .bench/out.safetensors s3://bench/out/llama.safetensors; do
    rm -rf .bench/out*
    /usr/bin/time -v -o .bench/small.time .bench/ckpt convert -q --force --to tpu --format safetensors gs://bench/llama-1g.pt $to
    rm -rf .bench/out*
    /usr/bin/time -v -o .bench/big.time .bench/ckpt convert -q --force --to tpu --format safetensors gs://bench/llama-2g.pt $to
    echo "peak RSS of GCS → $to: $(stat -c %s "$small") bytes $(rss .bench/small.time) MiB, $bytes bytes $(rss .bench/big.time) MiB"
  done
fi

kill -USR2 $server; sleep 0.2
.bench/ckpt convert -q --to tpu --drop '^(lm_head|model\.(embed_tokens|norm|layers\.[1-9][0-9]*)\.)' --format safetensors gs://bench/llama-2g.pt .bench/out-layer.safetensors
sleep 0.5
kill -USR1 $server; sleep 0.5
read -r served requests <.bench/gcs.stats || true
awk -v s="$served" -v r="$requests" -v b="$bytes" -v o="$(stat -c %s .bench/out-layer.safetensors)" 'BEGIN { printf "model.layers.0 alone from the emulator: %d of %d bytes served (%.2f%%) in %d requests for a %d-byte output\n", s, b, 100 * s / b, r, o }'
kill -USR2 $server; sleep 0.2
.bench/ckpt scan gs://bench/llama-2g.pt >/dev/null
kill -USR1 $server; sleep 0.5
read -r served requests <.bench/gcs.stats || true
awk -v s="$served" -v r="$requests" -v b="$bytes" 'BEGIN { printf "ckpt scan from the emulator: %d of %d bytes served (%.3f%%) in %d requests\n", s, b, 100 * s / b, r }'
