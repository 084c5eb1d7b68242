"""Shared-skill edits judged on pooled evidence (issue 48): video units scored by count, shared rules in the sim world,
and the loop's shared edit with its evidence by task type."""
import asyncio, json
from pathlib import Path

import pytest

from treetrm.data import SHARED_TASK, Question, video_units
from treetrm.gate.evaluators import UnitOutcome, paired_correct, unit_outcome_from_predictions
from treetrm.report import pooled_evidence_table, step_report
from treetrm.agent.skills import shared_seed_text
from treetrm.bench.loop_bench import DEFAULT_GRID_SPLIT
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world, load_world, true_accuracy, world_questions_by_id, check_world
from treetrm.sim.roles import SimJudge, SimEvolver
from treetrm.sim.sim_agent import SimAgent

def _q(i, video, task_type): return Question(f'q{i}', video, task_type, f'question {i}?', ('a', 'b', 'c', 'd'), 'A')

def test_video_units_pair_by_count():
    qs = [_q(1, 'v1', 'Counting Problem'), _q(2, 'v1', 'OCR Problems'), _q(3, 'v2', 'OCR Problems'),
          _q(4, 'v1', 'Action Recognition')]
    units = video_units(qs)
    assert [(u.unit_id, u.task_type, u.score, u.question_ids) for u in units] == [
        ('video/v1', SHARED_TASK, 'count', ('q1', 'q2', 'q4')), ('video/v2', SHARED_TASK, 'count', ('q3',))]
    rows = lambda right: [dict(question_id=q, correct=ok, stop_reason='answered')
                          for q, ok in zip(('q1', 'q2', 'q4'), right)]
    out = lambda right: unit_outcome_from_predictions(units[0], rows(right))
    # one right against two right: the candidate wins the pair although neither arm has all three right
    assert paired_correct(out([True, False, False]), out([True, True, False])) == (False, True)
    assert paired_correct(out([True, True, False]), out([False, False, True])) == (True, False)
    assert paired_correct(out([True, False, False]), out([False, True, False])) == (False, False)  # a tie
    # a unit scored 'all' keeps its meaning: right iff every question is
    assert paired_correct(UnitOutcome(False), UnitOutcome(True)) == (False, True)

WORLD = dict(profile='realistic', n_videos=40, questions_per_video={'Counting Problem': 2, 'OCR Problems': 2})

def test_shared_rules_act_on_every_type(tmp_path):
    plain = make_world(tmp_path/'plain', seed=3, **WORLD, realism=dict(effects='large'))
    zero = make_world(tmp_path/'zero', seed=3, **WORLD, realism=dict(effects='large', shared_rules=0))
    assert (plain/'world.json').read_bytes() == (zero/'world.json').read_bytes()  # worlds without them keep their bytes
    d = make_world(tmp_path/'shared', seed=3, **WORLD, realism=dict(effects='large', shared_rules=20))
    check_world(d)  # the shared rules recompute from the evidence and the settings
    world = load_world(d)
    rules = world['shared_rules']
    assert len(rules) == 20 and all(set(r['by_type']) == {'Counting Problem', 'OCR Problems'} for r in rules)
    qs = list(world_questions_by_id(d).values())
    base = {'_shared.md': 'no rule here'}
    # the rule with the largest mean effect: its effect on the whole population is the types' effects weighted
    # by their questions, and p_right (what true_accuracy sums) reproduces it exactly
    r = max(rules, key=lambda r: r['effect'])
    with_rule = {'_shared.md': f'- {r["text"]}'}
    gain = 100 * (true_accuracy(d, with_rule, qs) - true_accuracy(d, base, qs))
    assert gain == pytest.approx(r['effect'], abs=1e-3) and r['effect'] > 3
    for t, view in r['by_type'].items():
        mine = [q for q in qs if q.task_type == t]
        assert 100 * (true_accuracy(d, with_rule, mine) - true_accuracy(d, base, mine)) == pytest.approx(view['effect'],
                                                                                                         abs=1e-3)
    # the effects differ by type (spread 1 point around the mean), as the world's settings ask
    assert len({round(v['effect'], 2) for v in r['by_type'].values()}) == 2

TRAIN = dict(epochs=3, patience=3, min_ladder_units=20, max_calls=1500, deliver='current',
             batch=dict(batch_size=16, min_class=4, correct_ratio=0.2))

def _train(root:Path, world:Path, shared:bool):
    r = Runner(root/'ws', data_dir=world, config=TRAIN | dict(shared_edits=shared), split_config=DEFAULT_GRID_SPLIT,
               seed=0, concurrency=1, progress=False,  # a video unit of 4 questions holds the one slot
               providers={'agent': SimAgent(world, 0, one_call=True), 'judge': SimJudge(world, 0),
                          'evolver': SimEvolver(world, 0)})
    async def go():
        await r.split()
        return await r.train('shared', acceptance='gate')
    return r, asyncio.run(go())

def test_shared_edits_are_gated_on_video_units(tmp_path):
    world = make_world(tmp_path/'world', seed=7, **WORLD | dict(n_videos=80),  # a world where one is confirmed
                       realism=dict(effects='large', shared_rules=40, video_idiosyncrasy=0.1))
    runner, res = _train(tmp_path/'on', world, True)
    shared = [d for d in res.state.decisions if d['task_type'] == SHARED_TASK and d['kind'] == 'gate']
    assert shared  # the loop proposed and judged shared edits
    val = runner.pool('validation')
    for d in shared:
        assert d['target'] == '_shared.md'
        # its evidence by type covers the questions of the video units it paired: at least one unit's worth, never
        # more than the pool, every type of the pool there
        n = sum(v['n'] for v in d['by_type'].values())
        assert d['n_used'] <= n <= len(val) and set(d['by_type']) <= {q.task_type for q in val}
    table = pooled_evidence_table(shared)
    assert set(table['task_type']) >= {'ALL'} and table.filter(table['task_type'] == 'ALL')['questions'].sum() == \
        sum(v['n'] for d in shared for v in d['by_type'].values())
    # the step report shows it like a skill's edit: a row of its gate table, its e-value trajectory drawn
    rep = step_report(runner.log, res.internal_run_id, shared[0]['gate_id'])
    assert SHARED_TASK in set(rep['gate_table']['task_type'])
    # the shared skill appears with its first confirmed edit, from its seed; before it, no prompt changed
    files, confirmed = runner.skills.read_files(res.state.skills_current), [d for d in shared if d.get('version')]
    first = runner.skills.read_files(runner.resolve_version('seed'))
    assert '_shared.md' not in first and confirmed and 'always: true' in files['_shared.md']
    assert runner.skills.read_files(confirmed[0]['version'])['_shared.md'].startswith(shared_seed_text()[:200])
    _, off = _train(tmp_path/'off', world, False)
    assert not [d for d in off.state.decisions if d['task_type'] == SHARED_TASK]  # off: no shared edit at all

ROOT = Path(__file__).resolve().parents[1]
LEVERS_REPORT = ROOT/'nbs/bench/results/levers-report-2026-12-07.json'

def test_the_committed_lever_json_answers_the_registration():
    ("The committed lever runs answer the committed registration with its report seeds (the benchmark page's tables "
     "are `levers_markdown` of the JSON, made at docs build time).")
    from treetrm.core import read_json
    from treetrm.bench.regime_map import preregistration
    from treetrm.bench.levers import LEVERS_REGISTRATION
    m, reg = read_json(LEVERS_REPORT), preregistration(ROOT/LEVERS_REGISTRATION)
    assert m['kind'] == 'report' and set(m['seeds']) <= set(reg['report_seeds'])
    assert m['preregistration']['sha256'] == reg['sha256']  # it answers the committed registration
