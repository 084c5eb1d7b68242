"Simulated type-I error, exact Ville bound, DP vs Monte Carlo, and the gate's exact figures recomputed independently."
import functools, itertools, math
from dataclasses import replace
from fractions import Fraction
import numpy as np
import pytest
from scipy import special, stats
from treetrm.gate.evalues import (GateParams, e_value_plus, log_e_value_plus, log_e_value_futility,
                                   mcnemar_exact_one_sided)
from treetrm.gate.decision import RULE_DECISIONS
from treetrm.gate.simulate import (simulate_ladders, run_rules, summarise_rules, gate_paths,
                              gate_outcome_distribution, distribution_summary, ville_crossing_probability,
                              fixed_n_power, fixed_n_power_n, q_for_gain, REFERENCE)
from treetrm.gate.planning import ALPHA_DIAL, gate_at_alpha
from treetrm.train.settings import DEFAULT_GATE

N = 20_000
ALPHA = 0.05
BOUND = ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/N)   # alpha + 3 standard errors
FLOAT_SUM = 1e-12   # two exact DPs summing the same ~cap^2 probabilities in another order differ by rounding only

def rates(outcomes, params=GateParams()):
    rule, units = gate_paths(outcomes, params)
    names = np.array(RULE_DECISIONS)[rule]
    return {d: float((names == d).mean()) for d in set(RULE_DECISIONS)}, units

# --- a second, independent way to the exact figures ------------------------------------------------------------------
# Nothing below calls the library's DP, its tables, GATE_EXITS or its e-values: E+ and E_fut come from closed forms
# (binomial tails), the gate's exits are written out from their table in nbs/gate/00a_decision.ipynb, and the Ville
# bound and the McNemar critical values are counted in integers.

def log_e_plus_closed(w, l):
    "log E+(W, L), uniform prior on q in [1/2, 1]: E+ = 2^(n+1) P(Bin(n+1, 1/2) <= W) / ((n+1) C(n, W)), n = W + L."
    w, l = np.asarray(w, float), np.asarray(l, float)
    n = w + l
    log_choose = special.gammaln(n + 1) - special.gammaln(w + 1) - special.gammaln(l + 1)
    return stats.binom.logcdf(w, n + 1, 0.5) + (n + 1)*math.log(2) - np.log(n + 1) - log_choose

def log_e_futility_closed(w, l, q1):
    "log E_fut(W, L) = log of B(W+1, L+1) P(Bin(n+1, q1) > W) / (q1^(W+1) (1 - q1)^L), n = W + L."
    w, l = np.asarray(w, float), np.asarray(l, float)
    return special.betaln(w + 1, l + 1) + stats.binom.logsf(w, w + l + 1, q1) - (w + 1)*math.log(q1) - l*math.log1p(-q1)

DECISIONS_BY_HAND = ('accept_confirmed', 'accept_provisional', 'reject_directional', 'reject_futility',
                     'reject_inertia')

@functools.lru_cache(maxsize=None)  # the same exact figure serves several tests
def gate_dp_by_hand(cap, d, q, log_confirm=math.log(20), alpha_dir=0.05, min_n=20, alpha_prov=0.2, q1=None,
                    beta_fut=0.2, alpha_final=0.0, tiny=1e-30):
    "Exact (P(decision), P(stop after n units), mass left out) of the gate, its exits in order, by DP over (W, L)."
    w, l = np.indices((cap + 1, cap + 1))
    log_ep, p = log_e_plus_closed(w, l), stats.binom.sf(w - 1, w + l, 0.5)  # E+ and the exact McNemar p
    confirm, harm = log_ep >= log_confirm - 1e-12, log_ep.T >= math.log(1/alpha_dir) - 1e-12
    futile = log_e_futility_closed(w, l, q1) >= math.log(1/beta_fut) - 1e-12 if q1 else np.zeros_like(confirm)
    look = p <= alpha_final if alpha_final > 0 else np.zeros_like(confirm)
    holds = (w > l) & (p <= alpha_prov)
    out, stop_at, left_out = dict.fromkeys(DECISIONS_BY_HAND, 0.0), np.zeros(cap + 1), 0.0
    box, w0, l0 = np.ones((1, 1)), 0, 0  # probability of the running states, W from w0 and L from l0
    for n in range(1, cap + 1):
        new = np.zeros((box.shape[0] + 1, box.shape[1] + 1))
        new[:-1, :-1] += (1 - d)*box
        new[1:, :-1] += d*q*box
        new[:-1, 1:] += d*(1 - q)*box
        ws, ls = slice(w0, w0 + new.shape[0]), slice(l0, l0 + new.shape[1])
        end = n == cap
        may = n >= min_n or end
        reach = np.minimum(np.arange(w0, w0 + new.shape[0]) + cap - n, cap)  # W if every unit left were a win
        exits = [('accept_confirmed', may & confirm[ws, ls]), ('accept_confirmed', end & look[ws, ls]),
                 ('reject_directional', may & harm[ws, ls]), ('reject_futility', may & futile[ws, ls]),
                 ('accept_provisional', end & holds[ws, ls]), ('reject_inertia', np.full(new.shape, end)),
                 ('reject_futility', (n >= min_n) & ~confirm[reach][:, ls] & ~look[reach][:, ls] & ~holds[ws, ls])]
        running = np.ones(new.shape, bool)
        for decision, fires in exits:
            stops = running & fires
            out[decision] += new[stops].sum()
            stop_at[n] += new[stops].sum()
            running &= ~stops
        new[~running] = 0.0
        rows, cols = np.flatnonzero(new.max(axis=1) > tiny), np.flatnonzero(new.max(axis=0) > tiny)
        if not len(rows):
            left_out += new.sum()
            break
        box = new[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]  # drop the edges where every state is below `tiny`
        left_out += new.sum() - box.sum()
        w0, l0 = w0 + rows[0], l0 + cols[0]
    return out, stop_at, left_out

@functools.lru_cache(maxsize=None)
def peek_dp_by_hand(cap, d, q, alpha=0.05):
    "Exact P(peeking McNemar accepts within `cap` units): it stops at the first prefix with McNemar p <= alpha."
    w, l = np.indices((cap + 1, cap + 1))
    accepts = stats.binom.sf(w - 1, w + l, 0.5) <= alpha
    mass, accepted = np.zeros((cap + 1, cap + 1)), 0.0
    mass[0, 0] = 1.0
    for n in range(1, cap + 1):
        before = mass[:n, :n].copy()
        mass[:n, :n] *= 1 - d
        mass[1:n + 1, :n] += d*q*before
        mass[:n, 1:n + 1] += d*(1 - q)*before
        accepted += mass[accepts].sum()
        mass[accepts] = 0.0
    return accepted

@functools.lru_cache(maxsize=None)
def ville_by_path_counts(n_steps, threshold=20):
    "Exact P(E+ reaches `threshold` within n_steps fair flips), as a fraction: integer path counts, E+ in closed form."
    alive, crossed, pascal = [1], Fraction(0), [1, 1]  # alive[w]: uncrossed paths with W = w; pascal: C(n + 1, .)
    for n in range(1, n_steps + 1):
        alive = [(alive[w] if w < n else 0) + (alive[w - 1] if w else 0) for w in range(n + 1)]
        pascal = [1] + [pascal[k - 1] + pascal[k] for k in range(1, n + 1)] + [1]
        below, choose = 0, 1  # sum of C(n + 1, k) over k <= w; C(n, w)
        for w in range(n + 1):
            below += pascal[w]
            if below >= threshold*(n + 1)*choose:  # E+(w, n - w) >= threshold, in integers
                crossed += Fraction(alive[w], 2**n)
                alive[w] = 0
            choose = choose*(n - w)//(w + 1)
    return crossed

@functools.lru_cache(maxsize=None)  # the same exact figure serves several tests
def critical_wins_by_hand(m_max, alpha=Fraction(1, 20)):
    "Smallest W with P(Bin(m, 1/2) >= W) <= alpha, for m = 0..m_max (m + 1 when none), in integers."
    out, row = [], [1]
    for m in range(m_max + 1):
        if m: row = [1] + [row[k - 1] + row[k] for k in range(1, m)] + [1]
        w, tail = m + 1, 0  # tail: the number of the 2^m paths with at least w wins
        while w > 0 and tail + row[w - 1] <= alpha*2**m:
            w -= 1
            tail += row[w]
        out.append(w)
    return np.array(out)

def fixed_n_power_by_hand(n, d, q, crit):
    "Power of the fixed-n McNemar test: m ~ Bin(n, d) discordant units, then W ~ Bin(m, q) must reach crit[m]."
    m = np.arange(n + 1)
    return float((stats.binom.pmf(m, n, d)*stats.binom.sf(crit[:n + 1] - 1, m, q)).sum())

def fixed_n80_by_hand(d, q, crit):
    "Smallest n at which the fixed-n power reaches 80%."
    return next(n for n in range(1, len(crit)) if fixed_n_power_by_hand(n, d, q, crit) >= 0.8)

@functools.lru_cache(maxsize=None)
def library_dp(cap, d, q, params=GateParams()):
    "`gate_outcome_distribution`, computed once per scenario for the tests that share it."
    return gate_outcome_distribution(cap, d, q, params)

def median_units(stop_at):
    "Smallest n with P(stop within n units) >= 1/2."
    return int(np.searchsorted(np.cumsum(stop_at), 0.5))

def mean_and_sd(stop_at):
    "Mean and standard deviation of the units used, from P(stop after n units)."
    n = np.arange(len(stop_at))
    mean = float((n*stop_at).sum())
    return mean, math.sqrt(float(((n - mean)**2*stop_at).sum()))

def test_closed_forms_are_the_library_e_values():
    "The closed forms above are the e-values the gate computes (so the by-hand DPs test the gate, not a variant)."
    w, l = np.indices((300, 300))
    assert np.allclose(log_e_plus_closed(w, l), log_e_value_plus(w, l), rtol=1e-12, atol=1e-11)
    assert np.allclose(log_e_futility_closed(w, l, 0.65), log_e_value_futility(w, l, 0.65), rtol=1e-12, atol=1e-11)
    # by hand (nbs/gate/02_simulate.ipynb): E+(1,0) = 3/2, E+(2,0) = 7/3, E+(1,1) = 2/3, E+(2,1) = 11/12
    assert np.allclose(np.exp(log_e_plus_closed([1, 2, 1, 2], [0, 0, 1, 1])), [3/2, 7/3, 2/3, 11/12], rtol=1e-14)
    assert (critical_wins_by_hand(5) == [1, 2, 3, 4, 5, 5]).all()  # P(Bin(5, 1/2) = 5) = 1/32 <= 1/20; 4 flips never

@pytest.mark.parametrize('discordance,cap', list(itertools.product([0.2, 0.4], [60, 120, 240])))
def test_null_false_confirm_and_false_harm_within_alpha(discordance, cap):
    rng = np.random.default_rng(1000 + int(discordance*10)*1000 + cap)
    r, _ = rates(simulate_ladders(N, cap, discordance, 0.5, rng))
    assert r['accept_confirmed'] <= BOUND and r['reject_directional'] <= BOUND, r

def test_heterogeneous_null_within_alpha():
    "Per-unit discordance and q <= 1/2 varying along the ladder (a fixed pool of units of mixed difficulty)."
    rng = np.random.default_rng(7)
    cap = 240
    d = rng.uniform(0.05, 0.7, cap)
    q = rng.uniform(0.2, 0.5, cap)
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
    "The library's DP against integer path counts: the exact worst-case chance that E+ ever reaches 20 in 240 flips."
    exact = ville_by_path_counts(240)
    assert exact <= Fraction(1, 20)   # Ville's inequality, in exact arithmetic
    assert math.isclose(ville_crossing_probability(240, threshold=20), exact, rel_tol=FLOAT_SUM)

def test_ville_dp_matches_path_enumeration():
    "The DP agrees with brute force over all 2^n fair flip paths (n = 16)."
    n, thr = 16, 5.0
    paths = np.array(list(itertools.product((1, 0), repeat=n)))
    w = np.cumsum(paths, axis=1)
    l = np.arange(1, n + 1) - w
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

def test_gate_dp_at_cap_240_against_the_by_hand_dp_and_monte_carlo():
    "+10 points at discordance 0.2 (q = 0.75) and the null, cap 240: the library's DP is the by-hand DP to float"
    " rounding; 20,000 simulated ladders agree with it within 4 SE (exact: confirm 85.0%, mean 125.6, median 110)."
    for q in (0.75, 0.5):
        exact, stop_at, left_out = gate_dp_by_hand(240, 0.2, q)
        lib, lib_stop = library_dp(240, 0.2, q)
        assert left_out < FLOAT_SUM and set(lib) == set(exact), (left_out, lib)
        assert all(abs(lib[k] - exact[k]) <= FLOAT_SUM for k in exact), (lib, exact)
        assert np.abs(lib_stop - stop_at).max() <= FLOAT_SUM
        assert distribution_summary(lib_stop)['median_units'] == median_units(stop_at)
    exact, stop_at, _ = gate_dp_by_hand(240, 0.2, 0.75)
    s = summarise_rules(run_rules(simulate_ladders(N, 240, 0.2, 0.75, np.random.default_rng(5))))
    for k, p in exact.items():   # 4 binomial SE of N ladders: a right simulation misses with chance < 1e-4
        assert abs(s['gate'][k]['rate'] - p) <= 4*math.sqrt(p*(1 - p)/N), (k, s['gate'][k], p)
    mean, sd = mean_and_sd(stop_at)
    assert abs(s['gate']['mean_units'] - mean) <= 4*sd/math.sqrt(N)   # 4 SE of the mean of N stopping times

def test_peeking_inflates_and_the_gate_does_not():
    "Null, cap 240, d = 0.2: peeking McNemar accepts at its exact rate (15.6%, DP above) within 4 SE, the gate at a"
    " quarter of it at most."
    s = summarise_rules(run_rules(simulate_ladders(N, 240, 0.2, 0.5, np.random.default_rng(9))))
    peek = peek_dp_by_hand(240, 0.2, 0.5)
    assert abs(s['peek']['accept']['rate'] - peek) <= 4*math.sqrt(peek*(1 - peek)/N), (s['peek'], peek)
    assert peek > 3*ALPHA and s['gate']['accept_confirmed']['rate'] < s['peek']['accept']['rate'] / 4

def test_fixed_n_design_sizes():
    "Exact fixed-n McNemar against critical values counted in integers: n80 = 134 for +10 points and 527 for +5 at"
    " d = 0.2; null acceptance 2.65% at n = 60, 3.75% and 4.00% at n = 240 (d = 0.2, 0.4)."
    crit = critical_wins_by_hand(600)
    for gain in (0.10, 0.05):
        assert fixed_n_power_n(0.2, q_for_gain(gain, 0.2)) == fixed_n80_by_hand(0.2, q_for_gain(gain, 0.2), crit)
    for n, d in ((60, 0.2), (240, 0.2), (240, 0.4)):
        assert math.isclose(fixed_n_power(n, d, 0.5), fixed_n_power_by_hand(n, d, 0.5, crit), rel_tol=FLOAT_SUM)

def test_min_effect_futility_cuts_null_cost():
    "With q1 = 0.65, a null ladder at cap 240 costs 136.8 units instead of 211.8 (library DP = by-hand DP), and the"
    " gate still confirms at most alpha."
    off = distribution_summary(library_dp(240, 0.2, 0.5)[1])['mean_units']
    on_probs, on_stop = gate_outcome_distribution(240, 0.2, 0.5, GateParams(min_effect_q=0.65))
    on = distribution_summary(on_stop)['mean_units']
    off_exact = mean_and_sd(gate_dp_by_hand(240, 0.2, 0.5)[1])[0]
    on_exact = mean_and_sd(gate_dp_by_hand(240, 0.2, 0.5, q1=0.65)[1])[0]
    assert abs(off - off_exact) <= 240*FLOAT_SUM and abs(on - on_exact) <= 240*FLOAT_SUM, (off, off_exact, on, on_exact)
    assert on < off and on_probs['accept_confirmed'] <= ALPHA

def test_reference_figures_are_the_exact_values():
    "Every figure of `gate_sim.REFERENCE` (printed beside the benchmark's Monte Carlo) is recomputed here by the"
    " by-hand DPs, integer counts and scipy.stats.binom above, to the digits it is written with."
    crit, ref = critical_wins_by_hand(600), REFERENCE
    head, head_stop, _ = gate_dp_by_hand(240, 0.2, 0.75)
    got = [(ref['headline']['confirmed'], head['accept_confirmed'], 3),
           (ref['headline']['any_accept'], head['accept_confirmed'] + head['accept_provisional'], 3),
           (ref['headline']['mean_units'], mean_and_sd(head_stop)[0], 1),
           (ref['headline']['median_units'], median_units(head_stop), 0),
           (ref['headline']['fixed_n80'], fixed_n80_by_hand(0.2, 0.75, crit), 0),
           (ref['ville_worst_case_240'], float(ville_by_path_counts(240)), 4)]
    for d in (0.2, 0.4):
        r = ref['null'][f'd{d}']
        got += [(r['gate_confirmed'], gate_dp_by_hand(240, d, 0.5)[0]['accept_confirmed'], 4),
                (r['peek'], peek_dp_by_hand(240, d, 0.5), 3),
                (r['fixed_n_at_cap'], fixed_n_power_by_hand(240, d, 0.5, crit), 4)]
    for key, design, truth in (('+10->+15', 0.10, 0.15), ('+5->+10', 0.05, 0.10), ('+5->+15', 0.05, 0.15)):
        n80 = fixed_n80_by_hand(0.2, q_for_gain(design, 0.2), crit)
        _, stop_at, left_out = gate_dp_by_hand(2*n80, 0.2, q_for_gain(truth, 0.2))  # the gate's cap: twice n80
        assert left_out < FLOAT_SUM   # the pruned states move the mean by less than 2 n80 x 1e-12 units
        mean = mean_and_sd(stop_at)[0]
        r = ref['savings'][key]
        got += [(r['fixed_n'], n80, 0), (r['gate_mean_units'], mean, 1), (r['saving'], 1 - mean/n80, 3)]
    assert [r for r, _, _ in got] == [round(x, k) for _, x, k in got], got

# --- the cap-calibrated threshold (issue: known-cap thresholds) -----------------------------------------------------
from treetrm.gate.evalues import calibrated_threshold, round_cap
from treetrm.gate.planning import min_effect_q_for

# 60 and 300 validation units with the gate's pass, and with two fresh probation rounds
CAPS = [60, 120, 240, 480, 900]

@pytest.mark.parametrize('cap', CAPS)
def test_calibrated_null_false_confirm_within_alpha(cap):
    ("The whole gate (every exit, min_n, provisional, futility at the pool's q1) on null ladders, "
     "confirming at the threshold calibrated to the cap.")
    rng = np.random.default_rng(cap)
    n = N if cap <= 240 else N // 4   # long ladders cost more; the bound widens with fewer runs
    bound = ALPHA + 3*math.sqrt(ALPHA*(1 - ALPHA)/n)
    p = GateParams(evidence_cap=cap)
    p = GateParams(evidence_cap=cap, min_effect_q=min_effect_q_for(p, cap, 0.3))
    # every unit discordant (the worst case the threshold is calibrated for), and a realistic rate
    for d in (1.0, 0.3):
        r, _ = rates(simulate_ladders(n, cap, d, 0.5, rng), p)
        assert r['accept_confirmed'] <= bound, (cap, d, r)
    assert calibrated_threshold(cap) < 20

def test_calibrated_threshold_is_exact_at_the_worst_case():
    ("With every unit discordant and q = 1/2, crossings of the calibrated threshold happen at a rate within 3 SE of "
     "the DP's.")
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
            w += ~a[:, j] & b[:, j]
            l += a[:, j] & ~b[:, j]
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
    "q = 0.6 at discordance 0.26 over a 300-unit ladder (about 78 flips), cap 600: the e-process alone confirms 30.2%"
    " (exact DP of its crossing), a fixed-sample look at 0.03 adds the mid-sized edits it cannot reach (43.2%)."
    off, _ = gate_outcome_distribution(300, 0.26, 0.6, GateParams(evidence_cap=600))
    on, _ = gate_outcome_distribution(300, 0.26, 0.6, GateParams(evidence_cap=600, alpha_final=0.03))
    # the confirming levels: the thresholds calibrated to 600 units at alpha_e = 0.05 and 0.02 (tested above)
    off_exact = gate_dp_by_hand(300, 0.26, 0.6, log_confirm=math.log(calibrated_threshold(600)))[0]
    on_exact = gate_dp_by_hand(300, 0.26, 0.6, log_confirm=math.log(calibrated_threshold(600, 0.02)),
                               alpha_final=0.03)[0]
    for lib, exact in ((off, off_exact), (on, on_exact)):
        assert set(lib) == set(exact) and all(abs(lib[k] - exact[k]) <= FLOAT_SUM for k in exact), (lib, exact)
    assert on['accept_confirmed'] > off['accept_confirmed'] + 0.08, (off, on)

# --- every alpha the harm bar can derive (issue 31) ------------------------------------------------------------------
PROBATION_GATE = GateParams(alpha=0.05, alpha_final=0.0, alpha_prov=0.2)  # the seed's design: provisional accepts

@pytest.mark.slow
@pytest.mark.parametrize('cap', [20, 60, 300])
@pytest.mark.parametrize('design', ['default', 'probation'])
def test_every_dial_alpha_holds_its_level_on_null_edits(cap, design):
    "Null edits (q = 1/2) at every alpha on ALPHA_DIAL, as `gate_at_alpha` scales the shipped gate for the harm bar:"
    " the exact DP's confirm rate is at most alpha, and the vectorised gate on simulated ladders within alpha + 3 SE."
    " Reason: the e-process (Ville) and the final look (exact McNemar) split alpha between them (a union bound)."
    base = DEFAULT_GATE if design == 'default' else PROBATION_GATE
    rng, n = np.random.default_rng(cap), 20_000 if cap <= 60 else 4_000
    null = {d: simulate_ladders(n, cap, d, 0.5, rng) for d in (1.0, 0.3)}
    for alpha in ALPHA_DIAL:
        p = gate_at_alpha(replace(base, evidence_cap=cap), alpha)
        assert math.isclose(p.alpha, alpha) and p.alpha_final <= alpha
        for d, ladders in null.items():
            exact, _ = gate_outcome_distribution(cap, d, 0.5, p)
            assert exact['accept_confirmed'] <= alpha + FLOAT_SUM, (alpha, d, exact)
            if cap == 300 and alpha not in (0.01, 0.1): continue  # the exact DP covers the rest; the simulation is slow
            r, _ = rates(ladders, p)
            assert r['accept_confirmed'] <= alpha + 3*math.sqrt(alpha*(1 - alpha)/n), (alpha, d, r)
