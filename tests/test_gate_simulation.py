"Simulated type-I error, exact Ville bound, DP vs Monte Carlo, and regression anchors of the gate."
import itertools, math
import numpy as np
import pytest
from treetrm.gate import GateParams, e_value_plus, log_e_value_plus, mcnemar_exact_one_sided, RULE_DECISIONS
from treetrm.gate_sim import (simulate_ladders, run_rules, summarise_rules, gate_paths, gate_tables,
                              gate_outcome_distribution, distribution_summary, ville_crossing_probability,
                              fixed_n_power, fixed_n_power_n, q_for_gain)

N = 20_000
ALPHA = 0.05
BOUND = ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/N)   # alpha + 3 standard errors

def rates(outcomes, params=GateParams()):
    rule, units = gate_paths(outcomes, params)
    names = np.array(RULE_DECISIONS)[rule]
    return {d: float((names == d).mean()) for d in set(RULE_DECISIONS)}, units

@pytest.mark.parametrize('discordance,cap', list(itertools.product([0.2, 0.4], [60, 120, 240])))
def test_null_false_confirm_and_false_harm_within_alpha(discordance, cap):
    rng = np.random.default_rng(1000 + int(discordance*10)*1000 + cap)
    r, _ = rates(simulate_ladders(N, cap, discordance, 0.5, rng))
    assert r['accept_confirmed'] <= BOUND and r['reject_directional'] <= BOUND, r

def test_heterogeneous_null_within_alpha():
    "Per-unit discordance and q <= 1/2 varying along the ladder (a fixed pool of units of mixed difficulty)."
    rng = np.random.default_rng(7)
    cap = 240
    d = rng.uniform(0.05, 0.7, cap); q = rng.uniform(0.2, 0.5, cap)
    q[:40] = 0.5   # the head of the ladder is exactly null, the rest leans harmful
    r, _ = rates(simulate_ladders(N, cap, d, q, rng))
    assert r['accept_confirmed'] <= BOUND, r
    # and per ladder, not only per position: every unit of every ladder draws its own q <= 1/2
    q2 = rng.uniform(0.3, 0.5, (N, cap))
    r2, _ = rates(simulate_ladders(N, cap, 0.4, q2, rng))
    assert r2['accept_confirmed'] <= BOUND, r2

def test_ville_under_adversarial_stopping():
    "Stop at the best moment in hindsight: P(sup over the ladder of E+ >= 20) stays below alpha."
    rng = np.random.default_rng(11)
    D = simulate_ladders(N, 240, 0.4, 0.5, rng)
    table = log_e_value_plus(np.arange(241)[:, None], np.arange(241)[None, :])
    cw, cl = np.cumsum(D == 1, axis=1), np.cumsum(D == -1, axis=1)
    sup_crossed = (table[cw, cl] >= math.log(20)).any(axis=1).mean()
    assert sup_crossed <= BOUND
    assert rates(D)[0]['accept_confirmed'] <= sup_crossed   # the gate confirms only on a crossing

def test_exact_ville_bound_at_240_steps():
    p = ville_crossing_probability(240, threshold=20)
    assert p <= 0.05
    assert abs(p - 0.0326) < 5e-4   # the background study's exact figure

def test_ville_dp_matches_path_enumeration():
    "The DP agrees with brute force over all 2^n fair flip paths (n = 16)."
    n, thr = 16, 5.0
    paths = np.array(list(itertools.product((1, 0), repeat=n)))
    w = np.cumsum(paths, axis=1); l = np.arange(1, n + 1) - w
    table = e_value_plus(np.arange(n + 1)[:, None], np.arange(n + 1)[None, :])
    hits = (table[w, l] >= thr).any(axis=1).mean()
    assert 0 < hits < 1
    assert math.isclose(ville_crossing_probability(n, threshold=thr), hits, rel_tol=1e-12)

def test_dp_matches_monte_carlo():
    cap, d, q = 120, 0.2, q_for_gain(0.10, 0.2)
    exact, stop_at = gate_outcome_distribution(cap, d, q)
    mc, units = rates(simulate_ladders(N, cap, d, q, np.random.default_rng(3)))
    for k, p in exact.items():
        assert abs(mc[k] - p) <= 4*math.sqrt(p*(1 - p)/N) + 1e-9, (k, mc[k], p)
    sd = math.sqrt(((np.arange(cap + 1) - distribution_summary(stop_at)['mean_units'])**2 * stop_at).sum())
    assert abs(units.mean() - distribution_summary(stop_at)['mean_units']) <= 4*sd/math.sqrt(N)

def test_regression_anchors_cap_240():
    "Background study, +10 points at discordance 0.2 (q = 0.75), cap 240: confirm 85.1% +- 1.5, mean units 126 +- 3."
    s = summarise_rules(run_rules(simulate_ladders(N, 240, 0.2, 0.75, np.random.default_rng(5))))
    assert abs(s['gate']['accept_confirmed']['rate'] - 0.851) <= 0.015
    assert abs(s['gate']['mean_units'] - 126) <= 3 and abs(s['gate']['median_units'] - 110) <= 4
    exact, stop_at = gate_outcome_distribution(240, 0.2, 0.75)
    assert abs(exact['accept_confirmed'] - 0.851) <= 0.005 and distribution_summary(stop_at)['median_units'] == 110
    null, _ = gate_outcome_distribution(240, 0.2, 0.5)
    assert abs(null['accept_confirmed'] - 0.025) < 0.004   # the study's 2.5% (20,000 runs, SE 0.11 points)

def test_peeking_inflates_and_the_gate_does_not():
    s = summarise_rules(run_rules(simulate_ladders(N, 240, 0.2, 0.5, np.random.default_rng(9))))
    assert s['peek']['accept']['rate'] > 0.12        # the study: 15.4% at cap 240, d = 0.2
    assert s['gate']['accept_confirmed']['rate'] < s['peek']['accept']['rate'] / 4

def test_fixed_n_design_sizes():
    "Exact fixed-n McNemar: n80 = 134 for +10 points and 527 for +5 points at d = 0.2; null acceptance at n = 60 / 240."
    assert fixed_n_power_n(0.2, q_for_gain(0.10, 0.2)) == 134
    assert fixed_n_power_n(0.2, q_for_gain(0.05, 0.2)) == 527
    assert abs(fixed_n_power(60, 0.2, 0.5) - 0.027) < 0.001 and abs(fixed_n_power(240, 0.2, 0.5) - 0.037) < 0.001

def test_min_effect_futility_cuts_null_cost():
    "With q1 = 0.65, a null ladder at cap 240 costs about 138 units instead of 212 (study, exact DP)."
    off = distribution_summary(gate_outcome_distribution(240, 0.2, 0.5)[1])['mean_units']
    on_probs, on_stop = gate_outcome_distribution(240, 0.2, 0.5, GateParams(min_effect_q=0.65))
    assert abs(off - 212) < 2 and abs(distribution_summary(on_stop)['mean_units'] - 138) < 3
    assert on_probs['accept_confirmed'] <= ALPHA

# --- the cap-calibrated threshold (issue: known-cap thresholds) -----------------------------------------------------
from treetrm.gate import calibrated_threshold, round_cap, min_effect_q_for

CAPS = [60, 120, 240, 480, 900]   # 60 and 300 validation units with the gate's pass, and with two fresh probation rounds

@pytest.mark.parametrize('cap', CAPS)
def test_calibrated_null_false_confirm_within_alpha(cap):
    "The whole gate (every exit, min_n, provisional, futility at the pool's q1) on null ladders, confirming at the threshold calibrated to the cap."
    rng = np.random.default_rng(cap)
    n = N if cap <= 240 else N // 4   # long ladders cost more; the bound widens with fewer runs
    bound = ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/n)
    p = GateParams(evidence_cap=cap)
    p = GateParams(evidence_cap=cap, min_effect_q=min_effect_q_for(p, cap, 0.3))
    for d in (1.0, 0.3):   # every unit discordant (the worst case the threshold is calibrated for), and a realistic rate
        r, _ = rates(simulate_ladders(n, cap, d, 0.5, rng), p)
        assert r['accept_confirmed'] <= bound, (cap, d, r)
    assert calibrated_threshold(cap) < 20

def test_calibrated_threshold_is_exact_at_the_worst_case():
    "With every unit discordant and q = 1/2, crossings of the calibrated threshold happen at a rate within 3 SE of the DP's."
    cap, rng = 240, np.random.default_rng(5)
    c = calibrated_threshold(cap)
    exact = ville_crossing_probability(cap, threshold=c)
    D = simulate_ladders(N, cap, 1.0, 0.5, rng)
    table = log_e_value_plus(np.arange(cap + 1)[:, None], np.arange(cap + 1)[None, :])
    cw, cl = np.cumsum(D == 1, axis=1), np.cumsum(D == -1, axis=1)
    rate = (table[cw, cl] >= math.log(c) - 1e-12).any(axis=1).mean()
    assert exact <= ALPHA and abs(rate - exact) <= 3*math.sqrt(exact*(1 - exact)/N), (rate, exact)

@pytest.mark.parametrize('n_units,rounds,alpha_final', [(60, 2, 0), (60, 6, 0), (300, 2, 0), (60, 2, 0.03),
                                                        (300, 2, 0.03)])
def test_repeated_draw_null_within_alpha(n_units, rounds, alpha_final):
    "The fresh-evidence design: the gate's pass, then `rounds` fresh passes of both arms over the same units (each unit"
    " its own chance of a right answer, equal for both arms), the pooled E+ watched after every pair against the"
    " threshold calibrated to the whole evidence cap."
    n_sims = 4000
    rng = np.random.default_rng(n_units + rounds)
    cap = round_cap(n_units*(1 + rounds))
    log_c = math.log(calibrated_threshold(cap, ALPHA - alpha_final))   # with a final look, the e-process gets the rest
    p = rng.beta(0.6, 0.6, size=(n_sims, n_units))   # mostly near 0 or 1, some in between: heterogeneous units
    hit, w, l = np.zeros(n_sims, bool), np.zeros(n_sims, np.int64), np.zeros(n_sims, np.int64)
    table = log_e_value_plus(np.arange(cap + 1)[:, None], np.arange(cap + 1)[None, :])
    for k in range(1 + rounds):
        a, b = rng.random((n_sims, n_units)) < p, rng.random((n_sims, n_units)) < p
        for j in range(n_units):
            w += ~a[:, j] & b[:, j]; l += a[:, j] & ~b[:, j]
            hit |= table[w, l] >= log_c - 1e-12
        if k == 0 and alpha_final:   # the one look at the gate's ladder end, on the gate's own counts
            hit |= mcnemar_exact_one_sided(w, l) <= alpha_final
    assert hit.mean() <= ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/n_sims), hit.mean()

# --- the final look at the ladder end (alpha_final) ----------------------------------------------------------------
@pytest.mark.parametrize('cap,evidence', [(60, 180), (300, 600)])
def test_final_look_null_within_alpha(cap, evidence):
    "The whole gate with alpha split 0.02 (e-process) + 0.03 (one McNemar look at the ladder end): exact DP and Monte"
    " Carlo on null ladders, with futility at the pool's q1. Reason: the union bound, alpha_e + alpha_final = alpha."
    p = GateParams(evidence_cap=evidence, alpha_final=0.03)
    p = GateParams(evidence_cap=evidence, alpha_final=0.03, min_effect_q=min_effect_q_for(p, evidence, 0.3))
    for d in (1.0, 0.3):
        exact, _ = gate_outcome_distribution(cap, d, 0.5, p)
        assert exact['accept_confirmed'] <= ALPHA, (cap, d, exact)
    n = N if cap <= 60 else N // 4
    r, _ = rates(simulate_ladders(n, cap, 1.0, 0.5, np.random.default_rng(cap + 1)), p)
    assert r['accept_confirmed'] <= ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/n), r

def test_final_look_raises_power_at_the_ladder_end():
    "q = 0.6 at discordance 0.26 over a 300-unit ladder (about 78 flips), cap 600: the e-process alone confirms about"
    " 30% (exact DP of its crossing), a fixed-sample look at 0.03 adds the mid-sized edits it cannot reach."
    off, _ = gate_outcome_distribution(300, 0.26, 0.6, GateParams(evidence_cap=600))
    on, _ = gate_outcome_distribution(300, 0.26, 0.6, GateParams(evidence_cap=600, alpha_final=0.03))
    assert 0.25 < off['accept_confirmed'] < 0.40 and on['accept_confirmed'] > off['accept_confirmed'] + 0.08, (off, on)
