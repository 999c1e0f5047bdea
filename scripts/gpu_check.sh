#!/usr/bin/env bash
# The GPU check (see scripts/gpu_check.py): SmolLM2 with vLLM in the builtin trainer, and the
# TRL adapter, for a few steps on one CUDA GPU; one PASS/FAIL/SKIP line per check.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python scripts/gpu_check.py "$@"
