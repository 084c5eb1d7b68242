"""Nothing outlives a gate round: after a terminal decision, a guard abort, an evaluator that raises, or a cancelled
caller, no asyncio task is pending, the slot pool is back to full width and no candidate folder is left on disk."""
import asyncio, random, shutil
from pathlib import Path

import pytest

from treetrm.core import ConfigError, InfraError, project_root
from treetrm.data import Question, build_units
from treetrm.gate.ladder import Ladder
from treetrm.core import Slots
from treetrm.gate.evaluators import UnitOutcome, scripted_evaluator
from treetrm.gate.validate import validate_skills_concurrent

EDIT = {'target': '_default.md', 'ops': [{'op': 'append_to_section', 'section': 'Strategy', 'text': '- Look twice.'}],
        'rationale': 'cancel test'}
TYPES = ('Counting Problem', 'OCR Problems')

def make_world(n=100, k=1):
    "Two task types with n units of k questions each, and their ladders."
    qs = [Question(f'{tt}-{i}-{j}', f'v{i}', tt, 'q?', ('A. a', 'B. b'), 'A', unit_id=f'{tt}-u{i}' if k > 1 else None)
          for tt in TYPES for i in range(n) for j in range(k)]
    units = build_units(qs)
    return units, {tt: Ladder(tt, [u.unit_id for u in units if u.task_type == tt], 'cold') for tt in TYPES}

@pytest.fixture
def workspace(tmp_path):
    shutil.copytree(project_root()/'prompts'/'skills', tmp_path/'skills'/'v1')
    return tmp_path

def random_turns(seed=0):
    rng, memo = random.Random(seed), {}
    return lambda u, arm: memo.setdefault((u.unit_id, arm), rng.randrange(1, 8))

async def run_and_check(workspace, evaluate, width=6, world=None, expect=None, **kw):
    "Run one round; whatever happens, check that it left nothing behind. Returns (outcomes or exception, pool)."
    units, ladders = world or make_world()
    pool = Slots(width)
    try:
        result = await validate_skills_concurrent({tt: EDIT for tt in TYPES}, ladders=ladders, units=units,
                                                  evaluate=evaluate, base_skills_dir=workspace/'skills'/'v1',
                                                  concurrency=pool, run_id='r', gate_id='g1', prompts_version='p1',
                                                  **kw)
    except Exception as e:
        if expect is None or not isinstance(e, expect): raise
        result = e
    assert_clean(workspace, pool)
    return result, pool

def assert_clean(workspace, pool):
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not others, f'pending tasks left: {others}'
    assert (pool.free, pool.in_use, pool.waiting) == (pool.width, 0, 0), pool
    left = list((workspace/'tmp'/'candidates').rglob('*')) if (workspace/'tmp'/'candidates').exists() else []
    assert not left, f'candidate files left on disk: {left[:5]}'

def test_terminal_decision_cancels_queued_tasks(workspace):
    # the candidate fixes every unit the base gets wrong: both types confirm after min_n units of 100
    ev = scripted_evaluator(lambda u, arm: UnitOutcome(arm == 'cand' or int(u.unit_id.split('-')[1]) % 2 == 0),
                            random_turns())
    out, pool = asyncio.run(run_and_check(workspace, ev))
    assert {o.decision for o in out.values()} == {'accept_confirmed'}
    assert all(o.n_used == 20 for o in out.values())
    # queued tasks were cancelled: far fewer evaluations than the 400 (unit, arm) tasks of the two ladders
    assert len(ev.calls) <= 2*2*20 + pool.width
    assert all(existed for *_, existed in ev.calls)

def test_guard_abort_leaves_nothing(workspace):
    ev = scripted_evaluator(lambda u, arm: UnitOutcome(False, infra=int(u.unit_id.split('-')[1]) % 5 != 0),
                            random_turns(1))
    err, _ = asyncio.run(run_and_check(workspace, ev, expect=InfraError))
    assert 'gate round aborted' in str(err) and 'gate_guard_err=0.2' in str(err) and 'resume' in str(err)

def test_evaluator_that_raises_leaves_nothing(workspace):
    def outcome(u, arm):
        if u.unit_id == 'OCR Problems-7-0' and arm == 'cand': return RuntimeError('endpoint exploded')
        return UnitOutcome(arm == 'base')
    err, _ = asyncio.run(run_and_check(workspace, scripted_evaluator(outcome, random_turns(2)), expect=RuntimeError))
    assert 'endpoint exploded' in str(err)

def test_multi_question_units_share_the_pool(workspace):
    # units of 2 questions on a pool of 3: atomic two-slot acquires, never a deadlock, all slots returned
    ev = scripted_evaluator(lambda u, arm: UnitOutcome(arm == 'base'), random_turns(3))
    out, _ = asyncio.run(run_and_check(workspace, ev, width=3, world=make_world(40, k=2)))
    assert {o.decision for o in out.values()} <= {'reject_directional', 'reject_futility'}
    # a unit wider than the pool (a video's questions, for a shared edit) holds the whole pool and runs alone
    narrow, _ = asyncio.run(run_and_check(workspace, ev, width=1, world=make_world(40, k=2)))
    assert {o.decision for o in narrow.values()} <= {'reject_directional', 'reject_futility'}

def test_cancelled_caller_leaves_nothing(workspace):
    async def main():
        units, ladders = make_world()
        pool, started = Slots(6), asyncio.Event()
        def outcome(u, arm):
            started.set()
            return UnitOutcome(True)
        ev = scripted_evaluator(outcome, lambda u, arm: 50)
        task = asyncio.create_task(validate_skills_concurrent({tt: EDIT for tt in TYPES}, ladders=ladders, units=units,
                                                              evaluate=ev, base_skills_dir=workspace/'skills'/'v1',
                                                              concurrency=pool, run_id='r', gate_id='g1',
                                                              prompts_version='p1'))
        for _ in range(20): await asyncio.sleep(0)
        assert (workspace/'tmp'/'candidates'/'g1').is_dir() and pool.in_use == 6
        task.cancel()
        with pytest.raises(asyncio.CancelledError): await task
        assert_clean(workspace, pool)
    asyncio.run(main())

def test_frozen_type_cancels_its_queued_tasks_at_once(workspace):
    # Counting confirms after 20 units; OCR (all ties) runs on. Once Counting froze, its ~160 queued tasks must be
    # gone (cancelled), not left waiting for slots: count the live tasks while OCR evaluates rank 40.
    seen = {}
    def outcome(u, arm):
        rank = int(u.unit_id.split('-')[1])
        if u.task_type == 'OCR Problems':
            if rank == 40 and arm == 'cand': seen['live'] = len(asyncio.all_tasks())
            return UnitOutcome(True)
        return UnitOutcome(arm == 'cand' or rank % 2 == 0)
    out, pool = asyncio.run(run_and_check(workspace, scripted_evaluator(outcome, random_turns(4)), width=2))
    assert out['Counting Problem'].n_used == 20 and out['OCR Problems'].n_used > 40
    ocr_left = 2*(100 - 40)  # OCR's own tasks from rank 40 on
    assert seen['live'] <= ocr_left + pool.width + 2, seen   # + the caller; Counting's queued tasks are gone
