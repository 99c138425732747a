"""Theorems G7, G8: the identity in expectation for any policy, and its noise (beyond the paper).

The paper's expectations (Proposition 2) are for the scalar Bernoulli-logit prompt, where the
score gap s̄₊ − s̄₋ is 1.  For a general policy (a language model) the gap is a random vector;
these theorems take its expectation and covariance given k, the number correct in the group.

**The policy.**  Answers i = 1 … M + L, the first M correct, with probabilities π(i, θ), any
differentiable functions of the parameters (θ is any one coordinate: every statement about a
gradient is about each of its components), summing to 1.  The score of answer i is
s(i) = ∂ log π(i, θ)/∂θ, and p = Σ_{i ≤ M} π(i, θ).  G answers are drawn independently.

**Symbolic in M, L, G and k.**  The sums over answers are SymPy ``Sum`` objects of an undefined
function π(i, θ); the law of one answer given k comes from the binomial law of the other G − 1
(independence); the answers are exchangeable, so every position contributes alike.
**Cross-checked by enumeration.**  A softmax policy over 3 (G7) or 4 (G8) answers with symbolic
logit functions z_i(θ): every one of the (M + L)^G ordered groups is listed with its exact
probability, its rewards, its GRPO or Dr. GRPO advantages (from the rewards' mean and std) and
its update; conditioning on k is a ratio of exact finite sums.  No step samples.

>>> G7.prove().status
'proved'
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.core import (
    Claim,
    Formulas,
    G_interior,
    Theorem,
    binomial_pmf,
    expectation_of_polynomial,
    k,
    m,
    raw_moments,
)

__all__ = ["G7", "G8", "softmax_policy", "conditional_moments"]

GI = G_interior
p, G = F.p, F.G
_theta = sp.Symbol("theta", real=True)
_i = sp.Symbol("i", integer=True, positive=True)
_M, _L = sp.symbols("M L", integer=True, positive=True)  # numbers of correct and incorrect answers
_pi = sp.Function("pi")  # π(i, θ): the policy's probability of answer i
#: bound of the enumeration cross-checks (every G up to it, every 0 < k < G)
G_ENUMERATED = 4
G_ENUMERATED_NOISE = 4


def _score(i: Any) -> sp.Expr:
    """s(i) = ∂ log π(i, θ)/∂θ."""
    return sp.diff(sp.log(_pi(i, _theta)), _theta)


# --- the policy of the enumeration: softmax over symbolic logit functions ---------------------
def softmax_policy(n_correct: int, n_incorrect: int, n_params: int = 1) -> dict[str, Any]:
    """A softmax policy over ``n_correct + n_incorrect`` answers with logits z_i(θ₁, …) left as
    undefined functions: probabilities, scores (one list per parameter), p = P(correct) and ∇p.

    Derivatives are taken by SymPy, then e^{z_i} is written a_i (positive) and ∂z_i/∂θ_c is
    written d_{c,i} (real), so that every quantity is a rational function of the a's and d's.
    ``score_num`` holds the scores times S = Σ a_i (polynomials), for exact polynomial sums.
    """
    N = n_correct + n_incorrect
    thetas = sp.symbols(f"theta1:{n_params + 1}", real=True)
    z = [sp.Function(f"z{i}")(*thetas) for i in range(N)]
    a = sp.symbols(f"a0:{N}", positive=True)
    d = [sp.symbols(f"d{c}_0:{N}", real=True) for c in range(n_params)]
    Z = sum(sp.exp(zi) for zi in z)
    pi = [sp.exp(zi) / Z for zi in z]

    def plain(e: sp.Expr) -> sp.Expr:
        e = e.subs({sp.Derivative(z[i], thetas[c]): d[c][i] for i in range(N) for c in range(n_params)})
        return sp.cancel(e.subs({sp.exp(z[i]): a[i] for i in range(N)}))

    S = sum(a)
    scores = [[plain(sp.diff(sp.log(pi[i]), th)) for i in range(N)] for th in thetas]
    p_of_theta = sum(pi[:n_correct])
    return {
        "pi": [plain(x) for x in pi],
        "scores": scores,
        "weight": list(a),  # π_i·S
        "score_num": [[sp.expand(s * S) for s in sc] for sc in scores],  # s_i·S
        "S": S,
        "p": plain(p_of_theta),
        "grad_p": [plain(sp.diff(p_of_theta, th)) for th in thetas],
        "correct": list(range(n_correct)),
        "N": N,
    }


def conditional_moments(policy: dict[str, Any], GG: int, second: bool = False) -> dict[int, dict[str, Any]]:
    """For each 0 < k < GG, listing every ordered group of GG answers with its exact probability:
    the group std σ (one value for all groups with k correct, checked), E[C_c | k] for each
    parameter c and, with ``second``, E[C_0·C_c | k], where C_c = Σ_t (R_t − μ)·s_c(y_t) is the
    centred score sum: Dr. GRPO's update is C/G, GRPO's C/(G·σ).
    """
    acc: dict[int, dict[str, Any]] = {}
    w, num, correct, S = policy["weight"], policy["score_num"], set(policy["correct"]), policy["S"]
    for ys in itertools.product(range(policy["N"]), repeat=GG):
        R = [1 if y in correct else 0 for y in ys]
        kk = sum(R)
        if kk in (0, GG):  # silent group: every advantage is 0, so is the update
            continue
        mu = sp.Rational(kk, GG)
        sd = sp.sqrt(sum((r - mu) ** 2 for r in R) / GG)  # the group's population std, from its rewards
        weight = sp.Mul(*[w[y] for y in ys])  # probability × S^GG
        C = [sp.expand(sum((R[t] - mu) * nc[ys[t]] for t in range(GG))) for nc in num]  # centred sums × S
        row = acc.setdefault(
            kk, {"P": sp.Integer(0), "C": [sp.Integer(0)] * len(C), "CC": [sp.Integer(0)] * len(C), "sd": set()}
        )
        row["sd"].add(sd)
        row["P"] += weight
        row["C"] = [x + sp.expand(weight * c) for x, c in zip(row["C"], C)]
        if second:
            row["CC"] = [x + sp.expand(weight * C[0] * c) for x, c in zip(row["CC"], C)]
    out = {}
    for kk, r in acc.items():
        (sd,) = r["sd"]  # one std per k: the advantages depend on the group through k only
        out[kk] = {
            "sd": sd,
            "C": [sp.cancel(x / (r["P"] * S)) for x in r["C"]],
            "CC": [sp.cancel(x / (r["P"] * S**2)) for x in r["CC"]],
        }
    return out


# --- G7 ---------------------------------------------------------------------------------------
def _g7_symbolic(f: Formulas) -> list[Claim]:
    grad = sp.Symbol(r"\nabla p", real=True)  # ∇p as a plain symbol once it has been derived
    kk, GG = k, GI
    p_theta = sp.Sum(_pi(_i, _theta), (_i, 1, _M))
    # P(y_1 = a | k) = π(a)·P(k − 1 of the other G − 1 correct)/P(k) for a correct answer, so that
    # E[s̄₊ | k] = (1/k)·G·Σ_{a correct} P(y_1 = a | k)·s(a) (the G positions are exchangeable)
    w_plus = sp.combsimp(binomial_pmf(kk - 1, GG - 1) / binomial_pmf(kk, GG))
    w_minus = sp.combsimp(binomial_pmf(kk, GG - 1) / binomial_pmf(kk, GG))
    e_plus = GG / kk * w_plus * grad  # with Σ_{a correct} π(a) s(a) = ∇p, proved first
    e_minus = GG / m * w_minus * (-grad)  # Σ over the incorrect answers = ∇(1 − p) = −∇p
    out = [
        Claim(
            "sum over the correct answers of pi(a) s(a) = grad p (any number M of them)",
            sp.Sum(_pi(_i, _theta) * _score(_i), (_i, 1, _M)),
            sp.diff(p_theta, _theta),
        ),
        Claim(
            "sum over the incorrect answers of pi(a) s(a) = grad of their probability",
            sp.Sum(_pi(_i, _theta) * _score(_i), (_i, _M + 1, _M + _L)),
            sp.diff(sp.Sum(_pi(_i, _theta), (_i, _M + 1, _M + _L)), _theta),
        ),
        Claim("P(one given position is a correct a | k) = pi(a) k/(G p), symbolic G, k", w_plus, kk / (GG * p)),
        Claim("P(one given position is an incorrect a | k) = pi(a) (G - k)/(G (1 - p))", w_minus, m / (GG * (1 - p))),
        Claim("E[sbar+ | k] = grad p / p, the same for every k", e_plus, grad / p),
        Claim("E[sbar- | k] = -grad p / (1 - p)", e_minus, -grad / (1 - p)),
        Claim(
            "E[sbar+ - sbar- | k] = grad p / (p(1-p)) (the expected score gap)",
            e_plus - e_minus,
            f.expected_score_gap(p, grad),
        ),
    ]
    # E[g | k] = c(k, G)·E[s̄₊ − s̄₋ | k] (T3: g = c·(s̄₊ − s̄₋), c a function of k only); over k:
    gap = f.expected_score_gap(p, grad)
    e_grpo = sp.Sum(
        binomial_pmf(F.k, G) * f.update_coefficient(k=F.k, G=G) * gap, (F.k, 1, G - 1)
    )  # silent groups add 0
    out.append(
        Claim(
            "GRPO: E[g] = phi(G, p) grad(2 arcsin sqrt p)",
            e_grpo,
            f.fidelity(G, p) * sp.diff(f.arcsine_objective(p), p) * grad,
        )
    )
    e_dr = expectation_of_polynomial(f.update_coefficient(scale="none", k=F.k, G=G), F.k, raw_moments(2)) * gap
    out.append(Claim("Dr. GRPO: E[g] = (1 - 1/G) grad p", e_dr, (1 - 1 / G) * grad))
    out.append(
        Claim(
            "Dr. GRPO: E[g] = E[sigma^2] grad p/(p(1-p)) (Proposition 2's E[sigma^2])",
            e_dr,
            f.expected_sigma_sq(G, p) * gap,
        )
    )
    return out


def _g7_enumerated(f: Formulas) -> list[Claim]:
    pol = softmax_policy(2, 1)
    gap = f.expected_score_gap(pol["p"], pol["grad_p"][0])
    out = []
    for GG in range(2, G_ENUMERATED + 1):
        moments = conditional_moments(pol, GG)
        for kk in range(1, GG):
            mk = moments[kk]
            out.append(
                Claim(
                    f"softmax over 3 answers (2 correct), G={GG}, k={kk}: GRPO E[g | k] = sigma grad p/(p(1-p))",
                    mk["C"][0] / (GG * mk["sd"]),
                    f.expected_update_given_k(kk, GG, pol["p"], pol["grad_p"][0], f.update_coefficient(k=kk, G=GG)),
                )
            )
            out.append(
                Claim(
                    f"same, Dr. GRPO: E[g | k] = sigma^2 grad p/(p(1-p)) (G={GG}, k={kk})",
                    mk["C"][0] / GG,
                    f.update_coefficient(scale="none", k=kk, G=GG) * gap,
                )
            )
    return out


G7 = Theorem(
    "G7",
    "the identity in expectation, for any policy",
    "For any policy π with score s(y) = ∇log π(y), a prompt with success probability p (0 < p < 1) and G "
    "independent answers of which k are correct (0 < k < G): E[s̄₊ | k] = ∇p/p and E[s̄₋ | k] = −∇p/(1−p), so "
    "E[g | k] = c(k, G)·∇p/(p(1−p)) for every dial with two-valued zero-sum advantages — GRPO σ_k·∇p/(p(1−p)), "
    "Dr. GRPO σ_k²·∇p/(p(1−p)).  The expected update at fixed k points along ∇p for every k, with size exactly "
    "proportional to σ_k (GRPO) or σ_k² (Dr. GRPO).  Over k ~ Binomial(G, p): E[g] = φ(G, p)·∇(2 arcsin √p) "
    "(GRPO) and (1 − 1/G)·∇p (Dr. GRPO).  Symbolic in G, k and the number of answers; the conditional "
    f"expectations are also enumerated exactly for a softmax policy, every G ≤ {G_ENUMERATED}.",
    "beyond the paper (Theorem 1 and Proposition 2 for a general policy)",
    "answers i = 1..M+L (M correct), pi(i, theta) any differentiable probabilities summing to 1, theta any one "
    "parameter coordinate; G answers independent; M, L, k, m positive integers, G = k + m; silent groups contribute 0",
    lambda f: _g7_symbolic(f) + _g7_enumerated(f),
    lambda f: sp.Eq(sp.Symbol(r"\mathbb{E}[g \mid k]"), f.expected_update_given_k(), evaluate=False),
)


# --- G8 ---------------------------------------------------------------------------------------
def _g8_symbolic(f: Formulas) -> list[Claim]:
    mu_a, mu_b, m_ab = sp.symbols("mu_a mu_b m_ab", real=True)  # E[s_a], E[s_b], E[s_a s_b] on one side
    kk = sp.Symbol("n_side", integer=True, positive=True)  # the draws on one side: k or G − k
    # E[(Σ_i s_a(y_i))(Σ_i s_b(y_i))] over kk independent draws: kk diagonal pairs, kk(kk − 1) off-diagonal
    second = (kk * m_ab + kk * (kk - 1) * mu_a * mu_b) / kk**2
    sp_, sm_ = F.cov_plus, F.cov_minus
    c = f.update_coefficient(k=k, G=GI)
    return [
        Claim("Cov of the mean of n independent draws = Cov/n", second - mu_a * mu_b, (m_ab - mu_a * mu_b) / kk),
        # given k, s̄₊ and s̄₋ are means of disjoint independent draws: their covariances add
        Claim(
            "GRPO: Cov(g | k) = sigma^2 (Sigma+/k + Sigma-/(G-k))",
            c**2 * (sp_ / k + sm_ / m),
            f.update_covariance_given_k(k, GI, sp_, sm_, c),
        ),
        Claim(
            "GRPO with Sigma+ = Sigma- = Sigma: Cov(g | k) = Sigma/G for every k",
            f.update_covariance_given_k(k, GI, sp_, sp_, f.sigma(k, GI)),
            sp_ / GI,
        ),
        Claim(
            "Dr. GRPO with Sigma+ = Sigma- = Sigma: Cov(g | k) = sigma^2 Sigma/G",
            f.update_covariance_given_k(k, GI, sp_, sp_, f.update_coefficient(scale="none", k=k, G=GI)),
            f.sigma(k, GI) ** 2 * sp_ / GI,
        ),
    ]


def _class_covariance(pol: dict[str, Any], side: list[int], a: int, b: int) -> sp.Expr:
    """Cov(s_a, s_b) under the policy restricted to the answers in ``side``."""
    pi, sc = pol["pi"], pol["scores"]
    mass = sum(pi[i] for i in side)
    ea = sum(pi[i] * sc[a][i] for i in side) / mass
    eb = sum(pi[i] * sc[b][i] for i in side) / mass
    return sum(pi[i] * sc[a][i] * sc[b][i] for i in side) / mass - ea * eb


#: the exact rational policies of G8's enumeration: e^{z_i} for the 4 answers, then ∂z_i/∂θ for 2 parameters
NOISE_POLICIES = (
    ((1, 2, 3, 4), ((1, -2, 3, 0), (2, 1, -1, 5))),
    ((sp.Rational(1, 3), 5, 2, sp.Rational(7, 2)), ((-3, 4, sp.Rational(1, 2), 2), (0, -1, 6, sp.Rational(-5, 3)))),
)


def _at(pol: dict[str, Any], a: Sequence[Any], d: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The policy with e^{z_i} = a[i] and ∂z_i/∂θ_c = d[c][i]: exact rationals."""
    values = {sp.Symbol(f"a{i}", positive=True): sp.nsimplify(x) for i, x in enumerate(a)}
    values.update(
        {sp.Symbol(f"d{c}_{i}", real=True): sp.nsimplify(x) for c, row in enumerate(d) for i, x in enumerate(row)}
    )

    def put(x: Any) -> Any:
        return [put(y) for y in x] if isinstance(x, list) else (x.subs(values) if isinstance(x, sp.Basic) else x)

    return {key: put(v) for key, v in pol.items()}


def _g8_enumerated(f: Formulas) -> list[Claim]:
    symbolic = softmax_policy(2, 2, n_params=2)
    right, wrong = symbolic["correct"], [i for i in range(symbolic["N"]) if i not in symbolic["correct"]]
    out = []
    for n_pol, (a, d) in enumerate(NOISE_POLICIES, 1):
        pol = _at(symbolic, a, d)
        for GG in range(2, G_ENUMERATED_NOISE + 1):
            mom = conditional_moments(pol, GG, second=True)
            for kk in range(1, GG):
                mk = mom[kk]
                for b in (0, 1):  # the variance of g_1 and the covariance of g_1 and g_2 (GRPO: g = C/(G sigma))
                    cov = (mk["CC"][b] - mk["C"][0] * mk["C"][b]) / (GG * mk["sd"]) ** 2
                    want = f.update_covariance_given_k(
                        kk,
                        GG,
                        _class_covariance(pol, right, 0, b),
                        _class_covariance(pol, wrong, 0, b),
                        f.sigma(kk, GG),
                    )
                    out.append(
                        Claim(
                            f"rational softmax policy {n_pol} over 4 answers, 2 parameters, G={GG}, k={kk}: "
                            f"GRPO Cov(g_1, g_{b + 1} | k)",
                            cov,
                            want,
                        )
                    )
    return out


G8 = Theorem(
    "G8",
    "the noise of the update, for any policy",
    "With Σ₊ = Cov(s | y correct) and Σ₋ = Cov(s | y incorrect), the covariance of the update of a group with k "
    "correct answers (0 < k < G) is Cov(g | k) = c(k, G)²·(Σ₊/k + Σ₋/(G−k)); for GRPO with Σ₊ = Σ₋ = Σ it is Σ/G, "
    "the same for every k (Dr. GRPO: σ_k²·Σ/G).  Symbolic in k and G; enumerated exactly (rational arithmetic) "
    "for two softmax policies over 4 answers with 2 parameters (variance and cross-covariance), "
    f"every G ≤ {G_ENUMERATED_NOISE}.",
    "beyond the paper",
    "as G7; given k the correct answers are independent draws from pi restricted to the correct answers, the "
    "incorrect ones from pi restricted to the incorrect answers, the two sets independent",
    lambda f: _g8_symbolic(f) + _g8_enumerated(f),
    lambda f: sp.Eq(sp.Symbol(r"\operatorname{Cov}(g \mid k)"), f.update_covariance_given_k(), evaluate=False),
)
