#!/usr/bin/env bash
# The LM trainer's `gpu` configuration on one CUDA GPU: a ~25M-parameter Llama, 1-6 digit
# addition, GRPO, Dr. GRPO and DAPO (120 steps each, G = 16, 32 prompts per step), the identity
# checked on 8 groups of every step in fp32, rollouts and batched forwards in bf16.
# Sized for about ten minutes on one H200 (the config's 540 s time budget; pass e.g.
# `--time-budget 420` where a run must end sooner).
#
#   scripts/gpu_run.sh [OUT_DIR] [more `grpo-identity train lm` options]
#
# Writes into OUT_DIR (default results/lm-gpu; a relative path starts at the repository root):
# config.json, metrics.jsonl (as the run goes), summary.json, lm_identity.png, stdout.json (the
# --json summary), command.txt (the exact command) and env.txt (torch, GPU, seconds).
# PYTHON picks the interpreter (default: the first of .venv/bin/python and python3 whose torch
# sees a GPU); TIMEOUT caps the run in seconds (default 1500).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=results/lm-gpu
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a first argument that is not an option names the folder
  OUT="$1"
  shift
fi
if [ -z "${PYTHON:-}" ]; then
  for cand in .venv/bin/python python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
      PYTHON="$cand"
      break
    fi
  done
  PYTHON="${PYTHON:-python3}"  # no GPU anywhere: the trainer says so in one line (exit 2)
fi
if ! "$PYTHON" -c "import grpo_identity.trainer.lm.train" 2>/dev/null; then
  # the package layout needs an install; torch, transformers, numpy, matplotlib and tqdm must exist.
  # Offline machines have no build backend to fetch: use the environment's setuptools first.
  "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . || "$PYTHON" -m pip install -q --no-deps -e .
fi
mkdir -p "$OUT"
args=(train lm --config gpu --device cuda --out "$OUT" --json "$@")
printf '%q ' grpo-identity "${args[@]}" > "$OUT/command.txt"
echo >> "$OUT/command.txt"
"$PYTHON" - > "$OUT/env.txt" <<'PY'
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__)
print("cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
PY
start=$(date +%s)
timeout "${TIMEOUT:-1500}" "$PYTHON" -m grpo_identity "${args[@]}" > "$OUT/stdout.json"
echo "seconds $(( $(date +%s) - start ))" >> "$OUT/env.txt"
"$PYTHON" - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
f = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
print(f"identity max rel err {f(s['identity_max_rel_err'], '.2e')} over {s['groups_checked']} groups on {s['device']} in {s['seconds']:.0f} s")
for m, v in s["modes"].items():
    print(f"{m:8s} slope |g| vs sigma {f(v['loglog_slope'], '.3f')} (R2 {f(v['loglog_r2'], '.3f')}), |s+ - s-| vs sigma {f(v['gap_slope'], '.3f')}, "
          f"greedy acc {v['eval_acc_initial']:.3f} -> {v['eval_acc_final']:.3f}, samples {v['samples']}")
PY
