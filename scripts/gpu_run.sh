#!/usr/bin/env bash
# The LM trainer's `gpu` configuration on one CUDA GPU: a ~25M-parameter Llama, 1-6 digit
# addition, GRPO, Dr. GRPO and DAPO (120 steps each, G = 16, 32 prompts per step), the identity
# checked on 8 groups of every step in fp32, rollouts and batched forwards in bf16.
# Sized for about ten minutes on one H200.
#
#   scripts/gpu_run.sh [OUT_DIR] [more `grpo-identity train lm` options]
#
# Writes into OUT_DIR (default results/lm-gpu): config.json, metrics.jsonl (as the run goes),
# summary.json, lm_identity.png, command.txt (the exact command) and env.txt (torch, GPU).
# PYTHON picks the interpreter (default: .venv/bin/python when present, else python3);
# TIMEOUT caps the run in seconds (default 1500).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/lm-gpu}"
shift || true
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import grpo_identity.trainer.lm_train" 2>/dev/null; then
  "$PYTHON" -m pip install -q --no-deps -e .   # the package layout needs an install; deps (torch, transformers) must exist
fi
mkdir -p "$OUT"
cmd=("$PYTHON" -m grpo_identity train lm --config gpu --device cuda --out "$OUT" --json "$@")
printf '%q ' grpo-identity train lm --config gpu --device cuda --out "$OUT" --json "$@" > "$OUT/command.txt"
echo >> "$OUT/command.txt"
"$PYTHON" - > "$OUT/env.txt" <<'PY'
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__)
print("cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
PY
start=$(date +%s)
timeout "${TIMEOUT:-1500}" "${cmd[@]}" > "$OUT/stdout.json"
echo "seconds $(( $(date +%s) - start ))" >> "$OUT/env.txt"
"$PYTHON" - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"identity max rel err {s['identity_max_rel_err']:.2e} over {s['groups_checked']} groups on {s['device']} in {s['seconds']:.0f} s")
for m, v in s["modes"].items():
    print(f"{m:8s} slope |g| vs sigma {v['loglog_slope']}, |s+ - s-| vs sigma {v['gap_slope']}, greedy acc {v['eval_acc_initial']:.3f} -> {v['eval_acc_final']:.3f}, samples {v['samples']}")
PY
