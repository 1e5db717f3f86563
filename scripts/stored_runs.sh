#!/usr/bin/env bash
# The long runs whose JSON the chapters show beside their live previews, one after another.
# Each command resumes (the one rule: same settings resume, --fresh starts over): rerun this script
# after an interruption and finished runs are skipped, an unfinished one continues from its checkpoint.
# Sized for a 2-core CPU (see results/README.md for the wall times measured); run it in the
# background: setsid nohup nice bash scripts/stored_runs.sh > runs.log 2>&1 &
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source .venv/bin/activate
export OMP_WAIT_POLICY=PASSIVE  # threads sleep instead of spinning when the machine is shared
# Linux schedules each session (autogroup) as one unit, so `nice` alone does not make these runs
# yield to work in another terminal; lowering the session's autogroup priority does.
echo 19 > /proc/self/autogroup 2>/dev/null || true
capsedu() { python -m capsedu "$@" --no-progress > /dev/null; }

# Chapter 7: the two-digit experiment at a budget that settles (4 heads x 3 seeds x 12 epochs).
capsedu two-digits --preset long --out results/two_digits_long
# Chapter 7: the control, Su's head with one routing iteration (summing the votes without routing).
capsedu two-digits --preset long --models capsule-su-r1 --iterations 1 --out results/two_digits_r1
# Chapter 7: the rerun with per-item outcomes: 5 seeds of the four heads, the one-iteration head and the two
# controls (sum pooling; capsules with averaged votes), one file per (model, seed).
capsedu two-digits --preset long-items --out results/two_digits_items
# Chapter 7: the investigation, each setting changed on its own from the investigation preset, 3 seeds
# (the runs stored before 2026-12-03 name --preset quick, whose settings these were then).
mkdir -p results/two_digits_variants
V="two-digits --preset investigation --seeds 0 1 2"
capsedu $V --models pooling capsule-su --out results/two_digits_variants/preset
capsedu $V --models pooling --epochs 10 --out results/two_digits_variants/twice_the_epochs_pooling
capsedu $V --models capsule-su --epochs 6 --out results/two_digits_variants/twice_the_epochs
capsedu $V --models capsule-su --margin-lam 0.5 --out results/two_digits_variants/lambda_0.5
capsedu $V --models capsule-su --squash-k 1 --out results/two_digits_variants/squash_k_1
capsedu $V --models capsule-su --init torch --out results/two_digits_variants/torch_init
# Chapters 9 and 10 side by side, one thread each, so that both cores work on a 2-core machine.
# Chapter 10: five routing methods on one budget (EM and em-spread take most of the time).
capsedu compare-routing --preset long --out results/compare_routing --threads 1 &
# Chapter 9: the paper's three experiments (MultiMNIST also stores its fp16 weights, sha256 in its run file).
capsedu multimnist --preset long --out results/multimnist --threads 1
capsedu ablation --preset long --out results/ablation --threads 1
capsedu robustness --preset long --out results/robustness --threads 1
wait
# Chapter 11: the tutorial code's CapsNet against capsedu's, same digits, batch, epochs and seeds.
capsedu tutorial-vs-fixed --preset long --out results/tutorial_vs_fixed
