"""grpo_identity.checks.frameworks.trl_rollout: the engine stand-in's kept mass is what vLLM's sampler keeps
(temperature, then min_p, then top_k, then top_p on the top-k renormalised distribution, until the mass reaches p),
checked against a separate numpy reading of those rules on a stub model; and the sampler settings TRL passes on."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from grpo_identity.checks.frameworks.trl_rollout import Engine, sampler_settings  # noqa: E402

V, STEPS = 12, 5


def _engine(logits: np.ndarray, temperature: float) -> Engine:
    engine = Engine.__new__(Engine)
    engine.temperature = temperature
    # the stub model: for a sequence of P + STEPS tokens, position P - 1 + t holds step t's logits
    engine.model = lambda ids: NS(logits=torch.tensor(np.concatenate([logits, np.zeros((1, V))]))[None].float())
    return engine


def _kept_by_the_rules(p: np.ndarray, token: int, top_p: float, top_k: int, min_p: float) -> float:
    keep = p >= min_p * p.max() if min_p else np.ones_like(p, dtype=bool)
    order = [i for i in np.argsort(-p, kind="stable") if keep[i]]
    if top_k:
        order = order[:top_k]
    mass, chosen = p[order].sum(), []
    for i in order:  # the smallest set whose renormalised mass reaches top_p
        chosen.append(i)
        if p[chosen].sum() / mass >= top_p:
            break
    return float(p[sorted(set(chosen) | {token})].sum())


@pytest.mark.parametrize(
    "sampler",
    [
        {"top_k": 3},
        {"top_p": 0.6},
        {"min_p": 0.3},
        {"top_k": 5, "top_p": 0.7},
        {"min_p": 0.1, "top_k": 4, "top_p": 0.8},
    ],
)
def test_the_kept_mass_follows_vllms_sampler_rules(sampler):
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 1.5, (STEPS, V))
    completion = [int(t) for t in rng.integers(0, V, STEPS)]
    temperature = 0.8
    got = _engine(logits, temperature).kept_mass([0], completion, sampler)
    probs = np.exp(logits / temperature) / np.exp(logits / temperature).sum(1, keepdims=True)
    top_p, top_k, min_p = sampler.get("top_p", 1.0), sampler.get("top_k", 0), sampler.get("min_p", 0.0)
    expected = [_kept_by_the_rules(probs[t], completion[t], top_p, top_k, min_p) for t in range(STEPS)]
    assert got == pytest.approx(expected, abs=1e-5)
    assert all(0 < v <= 1 for v in got) and min(got) < 0.99  # each of these samplers truncates somewhere


def test_the_sampler_settings_are_the_truncating_ones_generation_kwargs_winning():
    plain = NS(top_p=1.0, top_k=0, min_p=None, generation_kwargs=None)
    assert sampler_settings(plain) == {}
    assert sampler_settings(NS(top_p=0.9, top_k=0, min_p=None)) == {"top_p": 0.9}
    overridden = NS(top_p=0.9, top_k=0, min_p=None, generation_kwargs={"top_p": 1.0, "top_k": 20, "seed": 1})
    assert sampler_settings(overridden) == {"top_k": 20}
