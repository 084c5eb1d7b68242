("Property tests of the gate: monotonicity, exact futility, symmetry, tie invariance, McNemar implication, stability, "
 "bad input.")
import math
from fractions import Fraction
import numpy as np
import pytest
from hypothesis import given, settings, assume, strategies as st
from treetrm.core import ConfigError, TreeTrmError
from treetrm.gate.evalues import (GateParams, GateInputError, e_value_plus, e_value_minus, log_e_value_plus,
                                   log_e_value_minus, mcnemar_exact_one_sided, pair_block, classify_quadrants)
from treetrm.gate.decision import gate_decision, DECISION_RANK, RULE_DECISIONS, EXIT_INDEX
from treetrm.gate.simulate import gate_tables, exit_from_tables

LOG20 = math.log(20)

@st.composite
def states(draw, max_n=300, max_rem=300):
    "A valid gate state (w, l, n_used, n_remaining)."
    n = draw(st.integers(0, max_n))
    w = draw(st.integers(0, n))
    l = draw(st.integers(0, n - w))
    return w, l, n, draw(st.integers(0, max_rem))

def rank(v): return DECISION_RANK[v.decision]

# --- the e-value itself ----------------------------------------------------------------------------------------

def exact_e_plus(w, l):
    "E+ with a flat prior as an exact fraction: 2^{W+L+1} * integral over [1/2, 1] of q^W (1-q)^L."
    integral = sum(Fraction(math.comb(l, j)*(-1)**j) * (1 - Fraction(1, 2**(w+j+1))) / (w+j+1) for j in range(l+1))
    return 2**(w+l+1) * integral

@settings(deadline=None)
@given(st.integers(0, 60), st.integers(0, 60))
def test_e_value_matches_exact_rational(w, l):
    exact = float(exact_e_plus(w, l))
    assert math.isclose(e_value_plus(w, l), exact, rel_tol=1e-9)

@settings(deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_e_values_finite_and_mirrored(w, l):
    lp, lm = log_e_value_plus(w, l), log_e_value_minus(w, l)
    assert math.isfinite(lp) and math.isfinite(lm)
    assert lm == log_e_value_plus(l, w) and e_value_minus(l, w) == e_value_plus(w, l)
    assert math.isfinite(e_value_plus(w, l)) and e_value_plus(w, l) > 0

@settings(deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_e_value_monotone(w, l):
    assert log_e_value_plus(w + 1, l) > log_e_value_plus(w, l)
    assert log_e_value_plus(w, l + 1) < log_e_value_plus(w, l)
    assert log_e_value_minus(w + 1, l) < log_e_value_minus(w, l)

# --- the decision ------------------------------------------------------------------------------------------------

@settings(deadline=None)
@given(states(), st.sampled_from([None, 0.6, 0.65, 0.8]))
def test_decision_monotone_in_w_and_l(s, q1):
    w, l, n, rem = s
    assume(w + l < n)   # room for one more flip
    p = GateParams(min_effect_q=q1)
    v = gate_decision(w, l, n, rem, p)
    vw, vl = gate_decision(w + 1, l, n, rem, p), gate_decision(w, l + 1, n, rem, p)
    assert vw.e_value >= v.e_value and vw.e_value_harm <= v.e_value_harm and rank(vw) >= rank(v)
    assert vl.e_value <= v.e_value and vl.e_value_harm >= v.e_value_harm and rank(vl) <= rank(v)

def test_decision_monotone_exhaustive_small_ladders():
    "Every state of ladders up to 120 units, through the same rule the scalar gate uses."
    cap, params = 240, GateParams()
    t = gate_tables(cap, params)
    to_rank = np.array([DECISION_RANK[d] for d in RULE_DECISIONS])
    w, l = np.indices((121, 121))
    for n in range(121):
        valid = w + l <= n
        for rem in (0, 1, 2, 5, 20, 60, 120):
            r = to_rank[exit_from_tables(t, w, l, n, rem, params)]
            r = np.where(valid, r, -1)
            ok_w = (r[1:, :] >= r[:-1, :]) | ~valid[1:, :]   # one more win never lowers the decision
            ok_l = (r[:, 1:] <= r[:, :-1]) | ~valid[:, 1:]   # one more loss never raises it
            assert ok_w.all() and ok_l.all(), (n, rem)

def best_reachable(log_ep, max_rem):
    "best[r, w, l] = the largest log E+ at any point of any continuation of at most r more flips (brute force)."
    best = [log_ep.copy()]
    for _ in range(max_rem):
        prev, b = best[-1], log_ep.copy()
        b[:-1, :] = np.maximum(b[:-1, :], prev[1:, :])
        b[:, :-1] = np.maximum(b[:, :-1], prev[:, 1:])
        best.append(b)
    return np.stack(best)

def test_futility_exact_exhaustive():
    "A futility reject means no continuation can confirm; a reachable confirmation never gets one. n_used <= 120."
    cap, params, max_rem = 240, GateParams(), 120
    t = gate_tables(cap, params)
    best = best_reachable(t.log_ep, max_rem)
    w, l = np.indices((121, 121))
    rem = np.arange(max_rem + 1)[:, None]
    n_checked = n_futile = 0
    for n in range(121):
        wv, lv = w[w + l <= n][None, :], l[w + l <= n][None, :]
        futile = exit_from_tables(t, wv, lv, n, rem, params) == EXIT_INDEX['unreachable']
        assert not (futile & (best[:, wv[0], lv[0]] >= LOG20)).any(), n
        assert (t.log_ep[wv + rem, lv][futile] < LOG20).all()
        n_checked += futile.size
        n_futile += futile.sum()
    assert n_checked > 30_000_000 and n_futile > 1_000_000

@settings(deadline=None)
@given(states(max_n=400, max_rem=400))
def test_futility_scalar(s):
    w, l, n, rem = s
    v = gate_decision(w, l, n, rem)
    if v.decision == 'reject_futility':
        assert e_value_plus(w + rem, l) < 20
        assert all(e_value_plus(w + j, l) < 20 for j in range(rem + 1))  # no point of the all-win path confirms
    if e_value_plus(w + rem, l) >= 20: assert v.decision != 'reject_futility'

@settings(deadline=None)
@given(states(max_n=150, max_rem=150))
def test_scalar_and_vectorised_rule_agree(s):
    w, l, n, rem = s
    t = gate_tables(n + rem)
    r = exit_from_tables(t, np.array([w]), np.array([l]), n, rem, GateParams())
    assert RULE_DECISIONS[int(r[0])] == gate_decision(w, l, n, rem).decision

@settings(deadline=None)
@given(states(), st.floats(0.001, 0.3))
def test_symmetry(s, alpha):
    w, l, n, rem = s
    p = GateParams(alpha=alpha, alpha_dir=alpha)
    v, m = gate_decision(w, l, n, rem, p), gate_decision(l, w, n, rem, p)
    assert v.e_value == m.e_value_harm and v.log_e_value == m.log_e_value_harm
    assert (v.decision == 'accept_confirmed') == (m.decision == 'reject_directional')
    assert v.delta_hat == -m.delta_hat and v.delta_shrunk == -m.delta_shrunk

@settings(deadline=None)
@given(states(), st.integers(1, 500))
def test_ties_change_no_e_value(s, ties):
    w, l, n, rem = s
    v, t = gate_decision(w, l, n, rem), gate_decision(w, l, n + ties, rem)
    assert (v.e_value, v.e_value_harm, v.log_e_value) == (t.e_value, t.e_value_harm, t.log_e_value)

@settings(deadline=None)
@given(st.lists(st.sampled_from([(False, True), (True, False), (True, True), (False, False)]), max_size=60),
       st.integers(0, 30))
def test_pair_block_ties_move_nothing(pairs, extra_ties):
    base = {f'u{i}': b for i, (b, c) in enumerate(pairs)}
    cand = {f'u{i}': c for i, (b, c) in enumerate(pairs)}
    order = list(base)
    pb = pair_block(base, cand, order)
    assert (pb.w, pb.l) == (pairs.count((False, True)), pairs.count((True, False))) and pb.n_used == len(pairs)
    for j in range(extra_ties):
        base[f't{j}'] = cand[f't{j}'] = bool(j % 2)
        order.append(f't{j}')
    pt = pair_block(base, cand, order)
    assert (pt.w, pt.l, pt.ties) == (pb.w, pb.l, pb.ties + extra_ties)
    q = classify_quadrants(base, cand)
    assert (len(q.improvements), len(q.regressions)) == (pb.w, pb.l)
    assert len(q.persistent_fails) + len(q.stable_successes) == pt.ties

def test_confirmation_implies_mcnemar_exhaustive():
    "E+ >= 20 implies exact one-sided McNemar p <= 0.05, for every W + L < 600."
    w, l = np.indices((600, 600))
    inside = w + l < 600
    strong = (log_e_value_plus(w, l) >= LOG20) & inside
    assert strong.sum() > 1000
    assert (mcnemar_exact_one_sided(w, l)[strong] <= 0.05).all()

@settings(deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))
def test_no_nan_or_overflow(w, l, rem):
    v = gate_decision(w, l, w + l, rem)
    assert all(math.isfinite(x) for x in (v.e_value, v.e_value_harm, v.delta_hat, v.delta_shrunk, v.log_e_value,
                                          v.log_e_value_harm))
    assert v == gate_decision(w, l, w + l, rem)   # deterministic

# --- bad input -----------------------------------------------------------------------------------------------------

@settings(deadline=None)
@given(states(max_n=100), st.integers(1, 50))
def test_more_flips_than_units_raises(s, extra):
    w, l, n, rem = s
    with pytest.raises(GateInputError, match='exceed'): gate_decision(n - l + extra, l, n, rem)

@pytest.mark.parametrize('args', [(-1, 0, 5, 5), (0, -1, 5, 5), (0, 0, -1, 5), (0, 0, 5, -1), (1.0, 0, 5, 5),
                                  (0, 0, 5, 2.5), (True, 0, 5, 5), ('1', 0, 5, 5), (None, 0, 5, 5)])
def test_bad_counts_raise_project_errors(args):
    with pytest.raises(GateInputError) as e: gate_decision(*args)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TreeTrmError)

@settings(deadline=None)
@given(st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(float('nan'))))
def test_alpha_outside_unit_interval_raises(a):
    for field in ('alpha', 'alpha_dir', 'alpha_prov', 'beta_fut'):
        with pytest.raises(ConfigError, match=field): GateParams(**{field: a})

def test_e_value_functions_reject_negative_counts():
    for f in (log_e_value_plus, e_value_plus, mcnemar_exact_one_sided):
        with pytest.raises(GateInputError): f(-1, 2)
        with pytest.raises(GateInputError): f(np.array([1, -2]), 2)
