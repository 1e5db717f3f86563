#!/usr/bin/env bash
# The GPU measurements of chapter 8, as one script (about 5 minutes on a recent GPU).
# Run from the repository root with capsedu installed and a CUDA GPU visible:
#     bash benchmarks/gpu_check.sh [output folder, default benchmarks/results]
# Each file is one JSON object stamped with its command, date, GPU and torch version.
set -euo pipefail
out="${1:-benchmarks/results}"
day="$(date -u +%F)"
mkdir -p "$out"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible'; print(torch.cuda.get_device_name())"
run() { local name="$1"; shift; echo "== $name: $*"; python "$@" > "$out/$name-cuda-$day.json"; }
run train_step benchmarks/train_step.py --device cuda --batch 128 --rounds 5 --steps 5
run stages     benchmarks/stages.py --device cuda --batch 128 --batches 32,64,128,256,512
# 60,000-image epochs (a replica of the sample standing in for MNIST); 2 epochs, the last
# reported, so that compilation and cuDNN autotuning fall in the first. test_acc: a short
# accuracy run, on the sample's 1,000 test digits.
run epoch-fp32          benchmarks/epoch.py --device cuda --sizes 60000 --epochs 2 --amp off
run epoch-bf16          benchmarks/epoch.py --device cuda --sizes 60000 --epochs 2 --amp bf16
run epoch-bf16-fast     benchmarks/epoch.py --device cuda --sizes 60000 --epochs 2 --amp bf16 --fast
run epoch-bf16-compiled benchmarks/epoch.py --device cuda --sizes 60000 --epochs 2 --amp bf16 --compile
ls -l "$out"/*-cuda-"$day".json
