#!/usr/bin/env bash
# The step-length calibration of the optimizer grid (docs/testbed.md, "Which optimizer?"):
# GRPO, seed 0, the first 25% of the hard setting's budget, at each lr of a cell's ladder; then
# the median update norm over every optimizer step of each run.
#
#   scripts/calibrate_step.sh OUT adamw 5e-6 1e-5 2e-5 4e-5
#   scripts/calibrate_step.sh OUT adamzero 5e-6 1e-5 2e-5
#   scripts/calibrate_step.sh OUT sgdm 1 2 4
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 OUT sgdm|adamzero|adamw LR [LR ...]" >&2
  exit 2
fi
out=$1 cell=$2
shift 2
case $cell in
  sgdm) optimizer=(--set train.optimizer=sgd --set train.sgd_momentum=0.9 --set train.grad_clip=1e-3) ;;
  adamzero) optimizer=(--set train.optimizer=adamw --set 'train.adam_betas=[0.0,0.999]' --set train.grad_clip=1.0) ;;
  adamw) optimizer=(--set train.optimizer=adamw --set 'train.adam_betas=[0.9,0.999]' --set train.grad_clip=1.0) ;;
  *) echo "$0: cell: one of sgdm, adamzero, adamw (got $cell)" >&2; exit 2 ;;
esac
mkdir -p "$out"
for lr in "$@"; do
  creditbench train --method grpo --task chain --seed 0 --threads 1 --quiet --output "$out" \
    --name "$cell-lr$lr" "${optimizer[@]}" --set train.lr="$lr" \
    --set task_options.steps=10 --set task_options.slip_rate=0.1 \
    --set task_options.weak_slip_rate=0.3 --set task_options.direct_slip_rate=0.65 \
    --set model.preset=tiny --set rollout.max_new_tokens=256 --set rollout.prompts_per_step=4 \
    --set train.minibatches=4 --set budget.unit=flops --set budget.amount=1.125e12 \
    --set 'budget.eval_fractions=[1.0]' --set eval.n_problems=8 --set eval.k_samples=1 >/dev/null
done
python - "$out" <<'PY'
import json, statistics, sys
from pathlib import Path

for run in sorted(Path(sys.argv[1]).iterdir()):
    metrics = run / "metrics.jsonl"
    if run.is_dir() and metrics.is_file():
        norms = [
            norm
            for line in metrics.read_text().splitlines()
            for norm in json.loads(line).get("update_norms", [])
        ]
        if norms:
            print(f"{run.name:20} optimizer steps {len(norms):3}  "
                  f"median |dθ| {statistics.median(norms):.4g}  first {norms[0]:.3g}")
PY
