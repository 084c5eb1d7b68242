("Property tests for treetrm.gate.ladder: ladder order, case-pack exclusion, fingerprints, frozen pools, p̂ EMA, "
 "BaselineCache.")
import json, tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from treetrm.core import ConfigError, DataError
from treetrm.data import Question, build_units
from treetrm.gate.ladder import Ladder, build_ladder, build_ladders, information, update_phat
from treetrm.gate.frozen_ladders import freeze_gate_pools, load_gate_pools
from treetrm.gate.baseline_cache import BaselineCache, skill_hash

TT = 'Counting Problem'
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

def make_units(sizes, task_type=TT):
    "Units u0, u1, ... where unit i has sizes[i] questions (ids u{i}q{j}); sizes > 1 share a unit_id."
    qs = [Question(f'u{i}q{j}', f'v{i % 4}', task_type, f'question {i}.{j}?', ('A. yes', 'B. no'), 'A',
                   unit_id=f'u{i}' if n > 1 else None)
          for i, n in enumerate(sizes) for j in range(n)]
    units = build_units(qs)
    return [u for u in units]

def uid(u): return u.unit_id

sizes_st = st.lists(st.integers(1, 3), min_size=0, max_size=40)
phat_st = st.floats(0, 1, allow_nan=False)

@st.composite
def world(draw, min_size=0):
    "Units, a baseline outcome per unit (some missing), p̂ history and a case-pack question set."
    units = make_units(draw(sizes_st.filter(lambda s: len(s) >= min_size)))
    ids = [uid(u) for u in units]
    baseline = {u: draw(st.booleans()) for u in ids if draw(st.integers(0, 9)) > 0}  # ~10% have no outcome
    phat = {u: draw(phat_st) for u in ids if draw(st.booleans())}
    qids = [q.question_id for u in units for q in u.questions]
    exclude = set(draw(st.lists(st.sampled_from(qids), max_size=5))) if qids else set()
    return units, baseline, phat, exclude

def eligible(units, exclude):
    return [uid(u) for u in units if not any(q.question_id in exclude for q in u.questions)]

# --- ladders ---------------------------------------------------------------------------------------------------

@SETTINGS
@given(world(), st.integers(0, 10**6))
def test_cold_ladder_is_a_permutation_of_eligible_units(w, seed):
    units, baseline, _, exclude = w
    lad = build_ladder(units, p_low=0.1, p_high=0.9, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)
    assert lad.mode == 'cold'
    assert sorted(lad.unit_ids) == sorted(eligible(units, exclude))
    assert lad.dropped['case_pack'] == len(units) - len(eligible(units, exclude))

@SETTINGS
@given(world(), st.integers(0, 10**6))
def test_warm_ladder_keeps_exactly_the_eligible_units_within_bounds(w, seed):
    units, baseline, phat, exclude = w
    elig = eligible(units, exclude)
    if not any(u in phat for u in elig): return  # that is a cold start, covered above
    lad = build_ladder(units, phat, p_low=0.1, p_high=0.9, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)
    prior = lambda u: 0.5 if u not in baseline else (2/3 if baseline[u] else 1/3)
    est = {u: phat.get(u, prior(u)) for u in elig}
    assert lad.mode == 'warm'
    assert sorted(lad.unit_ids) == sorted(u for u in elig if 0.1 <= est[u] <= 0.9)
    assert list(lad.phat) == [est[u] for u in lad.unit_ids]
    assert lad.dropped['below_p_low'] == sum(est[u] < 0.1 for u in elig)
    assert lad.dropped['above_p_high'] == sum(est[u] > 0.9 for u in elig)
    assert len(lad) + sum(lad.dropped.values()) == len(units)

def warm_full_bounds(w, seed):
    "The warm ladder of `w` with bounds [0, 1], or None when no eligible unit has history (the ladder would be cold)."
    units, baseline, phat, exclude = w
    if not any(u in phat for u in eligible(units, exclude)): return None
    return build_ladder(units, phat, p_low=0, p_high=1, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)

@SETTINGS
@given(world(), st.integers(0, 10**6))
def test_warm_with_full_bounds_is_a_permutation(w, seed):
    if (lad := warm_full_bounds(w, seed)) is None: return
    units, _, _, exclude = w
    assert sorted(lad.unit_ids) == sorted(eligible(units, exclude)) and len(set(lad.unit_ids)) == len(lad)

@SETTINGS
@given(world(), st.integers(0, 10**6))
def test_warm_order_is_non_increasing_in_information(w, seed):
    if (lad := warm_full_bounds(w, seed)) is None: return
    infos = [p*(1-p) for p in lad.phat]
    assert all(a >= b - 1e-9 for a, b in zip(infos, infos[1:]))
    assert [information(p) for p in lad.phat] == sorted((information(p) for p in lad.phat), reverse=True)

@SETTINGS
@given(world(), st.integers(0, 10**6), st.randoms(use_true_random=False))
def test_ladder_is_deterministic_per_seed_and_ignores_input_order(w, seed, rnd):
    units, baseline, phat, exclude = w
    kw = dict(p_low=0.05, p_high=0.95, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)
    shuffled = list(units)
    rnd.shuffle(shuffled)
    a, b = build_ladder(units, phat, **kw), build_ladder(shuffled, dict(reversed(phat.items())), **kw)
    assert a == b and a.fingerprint == b.fingerprint

def test_seed_shuffles_ties():
    units = make_units([1]*30)
    base = {uid(u): False for u in units}
    orders = {build_ladder(units, p_low=0, p_high=1, baseline=base, seed=s).unit_ids for s in range(3)}
    assert len(orders) == 3
    warm = {build_ladder(units, {uid(u): 0.4 for u in units}, p_low=0, p_high=1, seed=s).unit_ids for s in range(3)}
    assert len(warm) == 3

@SETTINGS
@given(world(), st.integers(0, 10**6), st.booleans())
def test_case_pack_questions_never_appear(w, seed, warm):
    units, baseline, phat, exclude = w
    lad = build_ladder(units, phat if warm else None, p_low=0, p_high=1, baseline=baseline, exclude=exclude,
                       seed=seed, task_type=TT)
    by_id = {uid(u): u for u in units}
    assert not any(q.question_id in exclude for u in lad.unit_ids for q in by_id[u].questions)

def expected_cold_classes(n_wrong, n_right):
    "Independent statement of the 2:1 rule: slots wrong, wrong, right, ... until the due class is empty."
    left, out = {'w': n_wrong, 'r': n_right}, []
    while left['w' if len(out) % 3 < 2 else 'r']:
        c = 'w' if len(out) % 3 < 2 else 'r'
        out.append(c)
        left[c] -= 1
    return out + ['w']*left['w'] + ['r']*left['r']

@SETTINGS
@given(world(), st.integers(0, 10**6))
def test_cold_two_to_one_interleave_then_probe_tail(w, seed):
    units, baseline, _, exclude = w
    lad = build_ladder(units, p_low=0, p_high=1, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)
    cls = ['n' if u not in baseline else 'r' if baseline[u] else 'w' for u in lad.unit_ids]
    known = [c for c in cls if c != 'n']
    assert cls == known + ['n']*cls.count('n')  # units with no baseline outcome come last
    assert known == expected_cold_classes(known.count('w'), known.count('r'))
    assert list(lad.phat) == [{'w': 1/3, 'r': 2/3, 'n': 0.5}[c] for c in cls]

@SETTINGS
@given(world(), st.integers(0, 10**6), st.integers(0, 10))
def test_probe_tail_cap_keeps_the_head(w, seed, cap):
    units, baseline, _, exclude = w
    kw = dict(p_low=0, p_high=1, baseline=baseline, exclude=exclude, seed=seed, task_type=TT)
    full, capped = build_ladder(units, **kw), build_ladder(units, probe_tail=cap, **kw)
    assert full.unit_ids[:len(capped)] == capped.unit_ids
    assert len(capped) + capped.dropped['beyond_probe_tail'] == len(full)

def test_ladder_input_errors():
    units = make_units([1, 1])
    with pytest.raises(DataError, match='several task types'):
        build_ladder(units + make_units([1], 'OCR Problems'), p_low=0, p_high=1, baseline={})
    with pytest.raises(ConfigError, match='baseline'): build_ladder(units, p_low=0, p_high=1)
    with pytest.raises(ConfigError, match='p_low'): build_ladder(units, p_low=0.6, p_high=0.4, baseline={})
    with pytest.raises(ConfigError, match='probe_tail'):
        build_ladder(units, p_low=0, p_high=1, baseline={}, probe_tail=-1)

# --- fingerprints and frozen pools -------------------------------------------------------------------------------

ladder_st = st.builds(
    lambda tt, ids, mode, ps, seed: Ladder(tt, ids, mode, ps[:len(ids)] + [0.5]*(len(ids) - len(ps)),
                                           {'case_pack': seed % 3, 'below_p_low': 0}, {'seed': seed, 'p_low': 0.05}),
    st.sampled_from([TT, 'OCR Problems', 'Temporal Reasoning']),
    st.lists(st.text('abcxyz0123', min_size=1, max_size=4), min_size=2, max_size=12, unique=True),
    st.sampled_from(['cold', 'warm']), st.lists(phat_st, max_size=12), st.integers(0, 1000))

def mutations(l):
    "Every single-field change of a ladder."
    d = l.to_dict()
    ids = d['unit_ids']
    yield dict(d, unit_ids=[ids[1], ids[0]] + ids[2:], phat=[d['phat'][1], d['phat'][0]] + d['phat'][2:])
    yield dict(d, unit_ids=ids[:-1], phat=d['phat'][:-1])
    yield dict(d, phat=[d['phat'][0] + 0.25 if d['phat'][0] < 0.5 else d['phat'][0] - 0.25] + d['phat'][1:])
    yield dict(d, mode='warm' if d['mode'] == 'cold' else 'cold')
    yield dict(d, task_type=d['task_type'] + ' (other)')
    yield dict(d, dropped=d['dropped'] | {'case_pack': d['dropped']['case_pack'] + 1})
    yield dict(d, params=d['params'] | {'seed': d['params']['seed'] + 1})

@SETTINGS
@given(ladder_st)
def test_fingerprint_changes_when_anything_changes(l):
    assert Ladder(**l.to_dict()).fingerprint == l.fingerprint
    for d in mutations(l): assert Ladder(**d).fingerprint != l.fingerprint, d

@SETTINGS
@given(st.lists(ladder_st, min_size=1, max_size=3, unique_by=lambda l: l.task_type), st.data())
def test_frozen_pools_round_trip_and_detect_tampering(ladders, data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d)/'gate_pools.json'
        pools = freeze_gate_pools(p, ladders)
        back = load_gate_pools(p, expect_fingerprint=pools.fingerprint)
        assert back.ladders == {l.task_type: l for l in ladders} and back.fingerprint == pools.fingerprint
        victim = data.draw(st.sampled_from(ladders))
        bad = data.draw(st.sampled_from(list(mutations(victim))[:3]))  # order / length / p̂ change
        doc = json.loads(p.read_text())
        doc['ladders'][victim.task_type].update(unit_ids=bad['unit_ids'], phat=bad['phat'])
        p.write_text(json.dumps(doc))
        with pytest.raises(DataError) as e: load_gate_pools(p)
        assert victim.task_type in str(e.value) and str(p) in str(e.value)

def test_expected_fingerprint_mismatch_is_a_clear_error(tmp_path):
    units = make_units([1]*6)
    lads = build_ladders(units, p_low=0, p_high=1, baseline={uid(u): i % 2 == 0 for i, u in enumerate(units)})
    pools = freeze_gate_pools(tmp_path/'gate_pools.json', lads)
    other = freeze_gate_pools(tmp_path/'other.json', build_ladders(units, p_low=0, p_high=1, seed=1,
                                                                 baseline={uid(u): True for u in units}))
    with pytest.raises(DataError, match='fresh run') as e:
        load_gate_pools(tmp_path/'gate_pools.json', other.fingerprint)
    assert 'gate_pools.json' in str(e.value) and pools.fingerprint[:12] in str(e.value)
    with pytest.raises(DataError, match='already frozen'): freeze_gate_pools(tmp_path/'gate_pools.json', other.ladders)
    (tmp_path/'junk.json').write_text('{"format": "something else"}')
    with pytest.raises(DataError, match='not a gate pools file'): load_gate_pools(tmp_path/'junk.json')

# --- p̂ EMA -------------------------------------------------------------------------------------------------------

@SETTINGS
@given(st.dictionaries(st.sampled_from('abcdefgh'), phat_st),
       st.dictionaries(st.sampled_from('abcdefghij'), st.booleans()), st.floats(0, 1))
def test_update_phat_is_the_gamma_ema_with_laplace_priors(phat, outcomes, gamma):
    new = update_phat(phat, outcomes, gamma, 'v2_e1_R')
    assert set(new) == set(phat) | set(outcomes)
    for u, p in new.items():
        if u not in outcomes: assert p == phat[u]
        elif u in phat: assert p == pytest.approx(gamma*phat[u] + (1 - gamma)*outcomes[u])
        else: assert p == (2/3 if outcomes[u] else 1/3)
        assert 0 <= p <= 1

@SETTINGS
@given(st.text(max_size=8), st.text(max_size=8))
def test_gate_runs_never_feed_phat(prefix, suffix):
    run_id = f'{prefix}_gate_{suffix}'
    with pytest.raises(ConfigError, match='gate run') as e: update_phat({'a': 0.5}, {'a': True}, 0.5, run_id)
    assert run_id in str(e.value)

# --- BaselineCache ---------------------------------------------------------------------------------------------

SHAS = [skill_hash(f'# skill {i}\n') for i in range(2)]
key_st = st.tuples(st.sampled_from([TT, 'OCR Problems']), st.sampled_from(SHAS), st.sampled_from(['p1', 'p2']),
                   st.sampled_from(['u0', 'u1', 'u2']))
op_st = st.tuples(key_st, st.booleans(), st.booleans())  # (key, correct, infra)

@SETTINGS
@given(st.lists(op_st, max_size=25))
def test_cache_never_stores_infra_and_survives_reopening(ops):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)/'ws'/'baseline_cache.sqlite'
        first = {}  # key -> first non-INFRA outcome: what the cache must serve
        with BaselineCache(path) as c:
            for key, correct, infra in ops:
                c.put(*key, correct, infra=infra)
                if not infra: first.setdefault(key, correct)
            assert c.stats['skipped_infra'] == sum(infra for _, _, infra in ops)
            assert c.stats['stored'] == len(first)
        with BaselineCache(path) as c:
            assert len(c) == len(first)
            for key, _, _ in ops: assert c.get(*key) == first.get(key)
            assert c.stats['hits'] + c.stats['misses'] == len(ops)
            assert c.stats['hits'] == sum(key in first for key, _, _ in ops)

def test_cache_key_parts_all_matter(tmp_path):
    with BaselineCache(tmp_path/'c.sqlite') as c:
        c.put(TT, SHAS[0], 'p1', 'u0', True)
        assert c.get(TT, SHAS[0], 'p1', 'u0') is True
        for other in [('OCR Problems', SHAS[0], 'p1', 'u0'), (TT, SHAS[1], 'p1', 'u0'), (TT, SHAS[0], 'p2', 'u0'),
                      (TT, SHAS[0], 'p1', 'u1')]:
            assert c.get(*other) is None
        with pytest.raises(ConfigError, match='skill_hash'): c.get(TT, '# raw skill text', 'p1', 'u0')
