#!/usr/bin/env bash
# The LM trainer's `gpu` configuration on one CUDA GPU (a ~25M-parameter Llama, 1-6 digit addition).
#
# EXPERIMENT=train (default): GRPO, Dr. GRPO and DAPO (120 steps each, G = 16, 32 prompts per
#   step), the identity checked on 8 groups of every step in fp32, rollouts and batched forwards in
#   bf16; about ten minutes on one H200 (the config's 540 s time budget).
# EXPERIMENT=conditional: the fixed-policy experiment (warm-up, then 12 prompts with solve rate in
#   [0.2, 0.8], 384 groups of 16 answers each, E[g | k] against sigma_k for GRPO and Dr. GRPO, the
#   projected check on every group along 4 directions, the exact one on 4 groups per prompt);
#   sampling under bf16 autocast, every gradient and comparison in fp32; sized for one H200 within
#   8 minutes (a 450 s time budget stops starting new prompts; about 37 GB of GPU memory holds one
#   mode's per-group gradients).  TASK (default split: several correct answers per prompt, so the
#   pre-registered noise criterion is testable; addition: one) picks the task.  Not yet run on a
#   GPU: the sizing is an estimate.
#
#   [EXPERIMENT=conditional] scripts/gpu_run.sh [OUT_DIR] [more `grpo-identity train lm` options]
#
# Writes into OUT_DIR (default results/lm-gpu, or results/lm-gpu-conditional; a relative path
# starts at the repository root): config.json, summary.json, the figure (lm_identity.png /
# conditional.png), metrics.jsonl (train), stdout.json (the --json summary), command.txt (the
# exact command) and env.txt (torch, GPU, seconds).
# PYTHON picks the interpreter (default: the first of .venv/bin/python and python3 whose torch
# sees a GPU); TIMEOUT caps the run in seconds (default 1500, conditional 600); DEVICE=cpu runs
# the same pipeline on the CPU (to try the script with a tiny budget: pass small --cond-* options).
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT="${EXPERIMENT:-train}"
DEVICE="${DEVICE:-cuda}"
# the memory check of `train lm` defaults to 16 GiB; one H200 has ~139 GiB (the conditional run needs ~50 by its estimate)
export GRPO_IDENTITY_MEMORY_GIB="${GRPO_IDENTITY_MEMORY_GIB:-120}"
# a device copy may carry no .git: the stored run's provenance records the commit given here
GRPO_IDENTITY_COMMIT="${GRPO_IDENTITY_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}"
export GRPO_IDENTITY_COMMIT
case "$EXPERIMENT" in
  train) OUT=results/lm-gpu; LIMIT=1500; extra=() ;;
  conditional) OUT=results/lm-gpu-conditional; LIMIT=600
    extra=(--experiment conditional --time-budget 450 --task "${TASK:-split}") ;;
  *) echo "EXPERIMENT must be train or conditional, got $EXPERIMENT" >&2; exit 2 ;;
esac
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a first argument that is not an option names the folder
  OUT="$1"
  shift
fi
if [ -z "${PYTHON:-}" ]; then
  for cand in .venv/bin/python python3; do
    if command -v "$cand" >/dev/null 2>&1 && { [ "$DEVICE" = cpu ] || "$cand" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; }; then
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
args=(train lm --config gpu --device "$DEVICE" "${extra[@]}" --out "$OUT" --json "$@")
printf '%q ' grpo-identity "${args[@]}" > "$OUT/command.txt"
echo >> "$OUT/command.txt"
"$PYTHON" - > "$OUT/env.txt" <<'PY'
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__)
print("cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
PY
start=$(date +%s)
rc=0
timeout "${TIMEOUT:-$LIMIT}" "$PYTHON" -m grpo_identity "${args[@]}" > "$OUT/stdout.json" || rc=$?
echo "seconds $(( $(date +%s) - start ))" >> "$OUT/env.txt"
echo "exit $rc" >> "$OUT/env.txt"
[ -s "$OUT/summary.json" ] || { echo "no summary written (exit $rc)" >&2; exit "$((rc ? rc : 1))"; }
"$PYTHON" - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
f = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
if s.get("experiment") == "conditional":
    c = s["conditional"]
    pc = c["projected_check"]
    print(f"conditional: {c['groups']} groups on {len(c['prompts'])} prompts on {s['device']} in {s['seconds']:.0f} s; projected check "
          f"{f(pc['projected_max_rel_err'], '.2e')}, exact {f(pc['exact_max_rel_err'], '.2e')}")
    for m, v in c["slope_by_mode"].items():
        iv = v["interval"] or [None, None]
        print(f"{m:8s} slope |E[g|k]| vs sigma {f(v['value'], '.3f')} [{f(iv[0], '.3f')}, {f(iv[1], '.3f')}] (predicted {v['predicted']}), "
              f"weighted {f(v['weighted']['value'], '.3f')}, cosine min {f(c['cosine_min']['by_mode'][m]['value'], '.3f')}")
    print(f"grad p relative difference (median over prompts) {f(c['grad_p_rel_err']['value'], '.3f')}")
    sys.exit(0)
print(f"identity max rel err {f(s['identity_max_rel_err'], '.2e')} over {s['groups_checked']} groups on {s['device']} in {s['seconds']:.0f} s")
for m, v in s["modes"].items():
    print(f"{m:8s} slope |g| vs sigma {f(v['loglog_slope'], '.3f')} (R2 {f(v['loglog_r2'], '.3f')}), |s+ - s-| vs sigma {f(v['gap_slope'], '.3f')}, "
          f"greedy acc {v['eval_acc_initial']:.3f} -> {v['eval_acc_final']:.3f}, samples {v['samples']}")
PY
