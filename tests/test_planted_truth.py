"""The planted truth holds through real inference on the demo world (650 questions, 100 per type, 50 synopsis).

Three skill configurations — the seed skills, plus every helpful rule, plus one trap rule per type — run through
`run_inference` with the simulated agent. Tolerance: given the behaviours each question is reached (right) or
guessed (right with probability 1/4), so a type's accuracy is a mean of n independent Bernoulli outcomes with SE at
most sqrt(p(1-p)/n) at the planted accuracy p (about 5 points at n = 100); we allow 3 SE per accuracy and
3·sqrt(SE_a² + SE_b²) for a difference of two configurations.
"""
import asyncio, math
import polars as pl
import pytest
from treetrm.bench.throughput import CONFIGS, planted_truth, planted_wide, rules_in_skills
from treetrm.core import project_root
from treetrm.sim.world import ensure_demo_world, load_world

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

WORLD = load_world()

@pytest.fixture(scope='module')
def table(tmp_path_factory):
    return asyncio.run(planted_truth(ensure_demo_world(), tmp_path_factory.mktemp('planted'), concurrency=16))

def test_seed_skills_hold_no_world_rule():
    assert rules_in_skills(WORLD, project_root()/'prompts'/'skills') == []

def test_enough_questions(table):
    n = table.filter(pl.col('config') == 'seed')['n']
    assert n.sum() >= 200 and n.min() >= 50 and set(table['config']) == set(CONFIGS)

def test_agent_reaches_exactly_the_planted_evidence(table):
    "Question by question, the agent is ready to answer exactly when `reachable` says the evidence is reachable."
    assert table['mismatch'].sum() == 0
    assert table['unfinished'].sum() == 0  # every plan fits the default budget of 15 tool steps

def test_accuracy_close_to_planted(table):
    assert (table['z'].abs() <= 3).all(), table.filter(pl.col('z').abs() > 3)

def test_helpful_beats_seed_beats_trap(table):
    w = planted_wide(table, WORLD)
    assert (w['accuracy_helpful'] > w['accuracy_seed']).all() and (w['accuracy_seed'] > w['accuracy_trap']).all(), w

def test_effects_match_world_json(table):
    "The trap's measured loss matches its recorded effect; the helpful gain matches the planted gain."
    w = planted_wide(table, WORLD)
    se = {c: table.filter(pl.col('config') == c).sort('task_type')['se'] for c in CONFIGS}
    w = w.sort('task_type')
    for i, row in enumerate(w.iter_rows(named=True)):
        # world.json's effect, exactly
        assert abs(row['planted_trap'] - row['planted_seed'] - row['trap_recorded']) < 0.03
        tol_trap = 3 * math.hypot(se['seed'][i], se['trap'][i])
        tol_gain = 3 * math.hypot(se['seed'][i], se['helpful'][i])
        assert abs(row['trap_measured'] - row['trap_recorded']) <= tol_trap, row
        assert abs(row['gain_measured'] - row['gain_planted']) <= tol_gain, row
