#!/usr/bin/env bash
# The GPU measurements, as one prepared script (benchmarks/README.md lists what each part measures):
#
#     bash benchmarks/gpu_check.sh [--dry-run] [--part chapters|speed|all] [output folder]
#
# chapters: every chapter in gpu mode (chapters.py); speed: train_step.py, stages.py, memory.py,
# cost_growth.py and 60,000-image epochs (epoch.py) in float32, bf16, bf16 + --fast and bf16 +
# --compile where the GPU has native bf16, and fp16 + GradScaler (plain and --fast): a T4's precision.
# Everything goes into ONE file, <folder>/gpu_check-<device>-<date>.json (default benchmarks/results);
# running one part again replaces that part and keeps the others. Without internet the chapters fall
# back to the embedded sample and the epochs use a 60,000-image replica of it ("data" says which).
# --dry-run: the same steps on the CPU, tiny, the first chapter only in smoke mode (a temporary folder).
# Estimated time on an H200 or A100: chapters 5-10 min, speed about 5 min.
set -euo pipefail
args="$*"
dry=0 part=all
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --part) part="$2"; shift 2 ;;
    *) break ;;
  esac
done
case "$part" in chapters|speed|all) ;; *) echo "--part must be chapters, speed or all" >&2; exit 2 ;; esac
parts="$(mktemp -d)"
if [ "$dry" = 1 ]; then
  device=cpu mode=smoke size=96 batch=16 epochs=1 rounds=1 chapters=(book/appendix_build.ipynb) test=(--test-limit 64)
  stage_args=(--batch 4 --batches 4,8 --iterations 1,3 --repeats 1) growth_args=(--batch 2 --rounds 1)
  out="${1:-$(mktemp -d)}"
else
  device=cuda mode=gpu size=60000 batch=128 epochs=2 rounds=5 chapters=() test=()
  stage_args=(--batch 128 --batches 32,64,128,256,512) growth_args=(--batch 4 --rounds 3)
  out="${1:-benchmarks/results}"
  python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible'"
fi
mkdir -p "$out"
day="$(date -u +%F)"
result="$out/gpu_check-$device-$day.json"
auto_amp="$(python -c "from capsedu.runtime.device import resolve_amp as r, resolve_device as d; print(r('auto', d('$device')))")"
# Full MNIST where it downloads (then cached for the chapters too), else the sample: decided once.
source=sample
if [ "$dry" = 0 ]; then
  source="$(python -c "from capsedu.data import load_dataset as l; print(l('mnist', 'auto', verbose=False).source)")"
fi
echo "gpu_check: device $device, amp auto = $auto_amp, MNIST source $source, writing $result" >&2

run() {  # name, script, arguments: one JSON part; a failing step is recorded, not fatal
  local name="$1"; shift
  echo "== $name: python $*" >&2
  if ! python "$@" > "$parts/$name.json"; then
    echo "gpu_check: $name failed (exit status kept in the JSON)" >&2
    [ -s "$parts/$name.json" ] || echo "{\"failed\": true, \"command\": \"python $*\"}" > "$parts/$name.json"
  fi
}

if [ "$part" != speed ]; then
  run chapters benchmarks/chapters.py --mode "$mode" "${chapters[@]}"
fi
if [ "$part" != chapters ]; then
  run train_step benchmarks/train_step.py --device "$device" --batch "$batch" --rounds "$rounds" --steps 2
  run stages benchmarks/stages.py --device "$device" "${stage_args[@]}"
  run memory benchmarks/memory.py --device "$device" --batch "$batch"
  run cost_growth benchmarks/cost_growth.py --device "$device" "${growth_args[@]}"
  # 2 epochs, the last reported, so that compilation and cuDNN autotuning fall in the first.
  epoch=(benchmarks/epoch.py --device "$device" --source "$source" --sizes "$size" --epochs "$epochs" --batch "$batch" "${test[@]}")
  run epoch-fp32 "${epoch[@]}" --amp off
  if [ "$auto_amp" = bf16 ]; then
    run epoch-bf16 "${epoch[@]}" --amp bf16
    run epoch-bf16-fast "${epoch[@]}" --amp bf16 --fast
    run epoch-bf16-compiled "${epoch[@]}" --amp bf16 --compile
  fi
  run epoch-fp16-scaler "${epoch[@]}" --amp fp16
  run epoch-fp16-scaler-fast "${epoch[@]}" --amp fp16 --fast
fi

python - "$parts" "$result" "$device" "$args" "$source" <<'EOF'
import json, sys
from pathlib import Path

import torch
from capsedu.runtime.results import provenance

parts, result, device, args, source = Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:]
merged = json.loads(result.read_text())["parts"] if result.exists() else {}
merged.update({p.stem: json.loads(p.read_text()) for p in sorted(parts.glob("*.json"))})
said = sorted({line for c in merged.get("chapters", {}).get("chapters", []) for line in c["printed"]
               if line.startswith("capsedu data")})
data = {"epochs": "full MNIST" if source == "full" else "60,000-image replica of the sample (no MNIST download)",
        "chapters said": said}
out = {"benchmark": "gpu_check", **provenance(f"bash benchmarks/gpu_check.sh {args}".strip(), device),
       "device": device, "cuda": torch.version.cuda, "data": data, "parts": merged}
result.write_text(json.dumps(out, indent=2) + "\n")
print(f"gpu_check: wrote {result} ({', '.join(merged)})", file=sys.stderr)
EOF
rm -rf "$parts"
