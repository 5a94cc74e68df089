#!/usr/bin/env bash
# scripts/bench/memory.sh: memory per tensor. Writes two safetensors files of SMALL and LARGE
# empty tensors (defaults 10 000 and 100 000, each file with one 4-element weight beside
# them, as a real checkpoint has), runs every output format and the read-only commands on
# both, and prints for each the peak RSS of the LARGE run and the bytes per tensor: the
# difference of the two peaks over the difference of the tensor counts, so the fixed cost
# of the process (runtime, buffers) drops out. Prints a Markdown table for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
small=${SMALL:-10000}
large=${LARGE:-100000}
dir=.bench/memory
rm -rf "$dir"
mkdir -p "$dir"
# CKPT_BIN measures another build (an earlier commit's) instead of this tree's.
if [ -n "${CKPT_BIN:-}" ]; then cp "$CKPT_BIN" "$dir/ckpt"; else CGO_ENABLED=0 go build -o "$dir/ckpt" ./cmd/ckpt; fi
for n in "$small" "$large"; do
  mkdir -p "$dir/hf$n"
  python3 - "$dir/hf$n/model.safetensors" "$n" <<'PY'
import json, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
hdr = {f"model.layers.{i}.w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(n)}
hdr["model.norm.w"] = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
b = json.dumps(hdr, separators=(",", ":")).encode()
b += b" " * (-len(b) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(b)) + b + struct.pack("<4f", 1, 1, 1, 1))
PY
  echo '{"model_type": "llama"}' >"$dir/hf$n/config.json"
done

# peak N NAME ARGS...: peak RSS in KiB of ckpt ARGS (N substituted for {n}).
peak() {
  local n=$1; shift
  local args=("${@//\{n\}/$n}")
  rm -rf "$dir/out$n"*
  /usr/bin/time -f %M -o "$dir/time" "$dir/ckpt" "${args[@]}" >/dev/null 2>"$dir/err" || { cat "$dir/err" >&2; return 1; }
  cat "$dir/time"
}

echo "| command ($large tensors) | peak RSS (MiB) | bytes per tensor |"
echo "|---|---:|---:|"
while IFS='|' read -r name cmd; do
  read -ra args <<<"$cmd"
  a=$(peak "$small" "${args[@]}")
  b=$(peak "$large" "${args[@]}")
  awk -v name="$name" -v a="$a" -v b="$b" -v s="$small" -v l="$large" \
    'BEGIN { printf "| %s | %.0f | %.0f |\n", name, b / 1024, (b - a) * 1024 / (l - s) }'
done <<EOC
convert to torch|convert --to tpu --format torch $dir/hf{n}/model.safetensors $dir/out{n}.pt
convert to safetensors|convert --to tpu $dir/hf{n}/model.safetensors $dir/out{n}.safetensors
convert to HF folder|convert --to tpu $dir/hf{n} $dir/out{n}
convert to DCP|convert --to tpu --format dcp $dir/hf{n}/model.safetensors $dir/out{n}
convert to DCP per device (v6e-8)|convert --to tpu --topology v6e-8 --format dcp $dir/hf{n}/model.safetensors $dir/out{n}
inspect|inspect $dir/hf{n}/model.safetensors
inspect --json|inspect --json $dir/hf{n}/model.safetensors
EOC
# scan reads a torch.save file (a safetensors file holds no pickle); check reads back a DCP
# output with its manifest. Both are written first.
for n in "$small" "$large"; do
  "$dir/ckpt" convert --to tpu --format torch "$dir/hf$n/model.safetensors" "$dir/src$n.pt" >/dev/null 2>&1
  "$dir/ckpt" convert --to tpu --format dcp "$dir/hf$n/model.safetensors" "$dir/src$n" >/dev/null 2>&1
done
for c in "scan (a torch.save file)|scan $dir/src{n}.pt" "check (a DCP output)|check $dir/src{n}"; do
  read -ra args <<<"${c#*|}"
  a=$(peak "$small" "${args[@]}")
  b=$(peak "$large" "${args[@]}")
  awk -v name="${c%%|*}" -v a="$a" -v b="$b" -v s="$small" -v l="$large" \
    'BEGIN { printf "| %s | %.0f | %.0f |\n", name, b / 1024, (b - a) * 1024 / (l - s) }'
done
