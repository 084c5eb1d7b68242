"""Arrival-order bias (gate_statistics.md §5.1): in a null world where the candidate is slow exactly when it is
wrong, consuming paired outcomes in completion order inflates false confirms; ladder order keeps them at the
level of the sequential test. Latency runs on a fake clock (event-loop turns), so the file is fast and exact."""
import asyncio, math, random, shutil
from pathlib import Path

import pytest

from treetrm.core import project_root
from treetrm.data import Question, build_units
from treetrm.gate.evalues import GateParams
from treetrm.gate.decision import gate_decision
from treetrm.gate.simulate import gate_outcome_distribution
from treetrm.gate.ladder import Ladder
from treetrm.gate.evaluators import UnitOutcome, scripted_evaluator
from treetrm.gate.validate import validate_skills_concurrent

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

N_CALLS, TYPES_PER_CALL, LADDER = 20, 20, 60   # 400 gates per consume mode, 60-unit ladders
P_RIGHT = 0.6                                   # both arms: same per-unit correctness probability (null world)
ALPHA = GateParams().alpha
EDIT = {'target': '_default.md', 'ops': [{'op': 'append_to_section', 'section': 'Strategy', 'text': '- Look twice.'}],
        'rationale': 'order-bias test'}

def make_world(call:int):
    "TYPES_PER_CALL task types with LADDER single-question units each, and independent null outcomes per arm."
    rng = random.Random(call)
    types = [f'T{call:02d}x{k:02d}' for k in range(TYPES_PER_CALL)]
    qs = [Question(f'{tt}-{i}', f'v{i}', tt, 'q?', ('A. a', 'B. b'), 'A') for tt in types for i in range(LADDER)]
    units = build_units(qs)
    truth = {(u.unit_id, arm): rng.random() < P_RIGHT for u in units for arm in ('base', 'cand')}
    ladders = {tt: Ladder(tt, [f'{tt}-{i}' for i in range(LADDER)], 'cold') for tt in types}
    return units, ladders, truth

def slow_when_wrong(truth):
    "The candidate takes 3 event-loop turns when it is wrong, 1 when right; the base always 1."
    return scripted_evaluator(lambda u, arm: UnitOutcome(truth[(u.unit_id, arm)]),
                              turns=lambda u, arm: 3 if arm == 'cand' and not truth[(u.unit_id, arm)] else 1)

def sequential_decision(ladder, truth):
    "The gate on the same outcomes, one unit at a time in ladder order."
    w = l = 0
    for n, u in enumerate(ladder.unit_ids, 1):
        b, c = truth[(u, 'base')], truth[(u, 'cand')]
        w += (not b) and c
        l += b and not c
        if (v := gate_decision(w, l, n, len(ladder) - n)).final: return v.decision, n

@pytest.fixture(scope='module')
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp('ws')
    (ws/'skills'/'v1').mkdir(parents=True)  # one skill file keeps the 800 candidate copies cheap
    shutil.copy(project_root()/'prompts'/'skills'/'_default.md', ws/'skills'/'v1')
    return ws

async def run_mode(workspace:Path, consume:str, check_reference:int=0):
    "Decisions of N_CALLS x TYPES_PER_CALL null gates with every (unit, arm) in flight at once."
    decisions = []
    for call in range(N_CALLS):
        units, ladders, truth = make_world(call)
        out = await validate_skills_concurrent({tt: EDIT for tt in ladders}, ladders=ladders, units=units,
                                               evaluate=slow_when_wrong(truth), base_skills_dir=workspace/'skills'/'v1',
                                               concurrency=2*len(units), run_id='bias', gate_id=f'{consume}{call}',
                                               prompts_version='p1', consume=consume)
        if call < check_reference:  # ladder mode must be exactly the sequential test
            for tt, o in out.items(): assert (o.decision, o.n_used) == sequential_decision(ladders[tt], truth)
        decisions += [o.decision for o in out.values()]
    return decisions

def rate(decisions): return sum(d == 'accept_confirmed' for d in decisions) / len(decisions)

def test_ladder_order_keeps_the_false_confirm_rate_and_arrival_order_inflates_it(workspace):
    ladder = asyncio.run(run_mode(workspace, 'ladder', check_reference=2))
    arrival = asyncio.run(run_mode(workspace, 'arrival'))
    n = len(ladder)
    se = math.sqrt(ALPHA*(1 - ALPHA)/n)
    r_ladder, r_arrival = rate(ladder), rate(arrival)
    # the sequential test's exact false-confirm chance in this world: W and L each 0.4 x 0.6 a unit (d = 0.48, q = 1/2)
    exact = gate_outcome_distribution(LADDER, 2*P_RIGHT*(1 - P_RIGHT), 0.5)[0]['accept_confirmed']   # 1.71%
    se_exact = math.sqrt(exact*(1 - exact)/n)
    print(f'false confirms over {n} null gates: ladder order {r_ladder:.3f} (exact {exact:.3f}), '
          f'arrival order {r_arrival:.3f}')
    assert n == N_CALLS*TYPES_PER_CALL >= 400
    # ladder order is the sequential test: its rate is a Binomial(n, exact) share, so within 3 of its SE (0.65 points)
    assert abs(r_ladder - exact) <= 3*se_exact, f'ladder-order false-confirm rate {r_ladder:.3f}, exact {exact:.3f}'
    pooled = (r_ladder + r_arrival)/2
    z = (r_arrival - r_ladder)/math.sqrt(2*pooled*(1 - pooled)/n)
    assert (r_arrival > ALPHA + 3*se
            and z > 5), f'arrival order shows no clear inflation: {r_arrival:.3f} vs {r_ladder:.3f} (z={z:.1f})'
    assert not list((workspace/'tmp'/'candidates').iterdir())
