("The hard call budget: every role counts, nothing runs past it, the cut step leaves nothing behind, "
 "and a resumed run keeps counting.")
import asyncio
import polars as pl
import pytest
from treetrm.core import BudgetError, CallBudget
from treetrm.log import FINAL_TEST, TrainRunId
from treetrm.bench.loop_bench import GRID_TYPES, DEFAULT_GRID_SPLIT
from treetrm.train.runner import Runner
from treetrm.llm.ledger import CALL_BUDGET
from treetrm.sim.world import make_world
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.roles import SimJudge, SimEvolver

SPLIT = dict(DEFAULT_GRID_SPLIT, val_wrong_min=2)

def _runner(tmp_path, world, max_calls, deliver='current'):
    roles = {'agent': SimAgent(world, 0, one_call=True), 'judge': SimJudge(world, 0), 'evolver': SimEvolver(world, 0)}
    cfg = dict(epochs=50, patience=50, min_ladder_units=4, max_calls=max_calls, deliver=deliver,
               batch=dict(batch_size=8, min_class=4, correct_ratio=0.2))
    return Runner(tmp_path/'ws', data_dir=world, config=cfg, split_config=SPLIT, concurrency=4, providers=roles,
                  progress=False)

@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('budget')/'world', seed=2, n_videos=16, profile='realistic',
                      questions_per_video=GRID_TYPES)

def _training_calls(r, rid):
    return r.run_calls(rid).filter(~pl.col('run_id').str.ends_with(FINAL_TEST))

@pytest.mark.parametrize('limit', [137, 450])
def test_budget_binds_every_role(tmp_path, world, limit):
    r = _runner(tmp_path, world, limit)
    res = asyncio.run(r.train('b', acceptance='greedy'))
    calls = _training_calls(r, res.internal_run_id)
    assert calls.height == limit  # spent to the call, never past it
    assert set(calls['role'].unique()) >= {'agent', 'judge'}
    spent = [d for d in res.state.decisions if d['kind'] == 'budget']
    assert len(spent) == 1 and spent[0]['decision'] == 'spent' and spent[0]['calls'] == limit
    assert res.metrics['delivered_version'] == res.state.skills_current  # deliver='current'
    # the final test is outside the budget
    assert r.log.predictions(TrainRunId(res.internal_run_id).final_test()).height == len(r.pool('test'))
    again = asyncio.run(r.train('b', acceptance='greedy'))
    assert again.resumed_finished and _training_calls(r, res.internal_run_id).height == limit

def test_no_task_outlives_a_spent_budget(tmp_path, world):
    r = _runner(tmp_path, world, 300)
    async def go():
        res = await r.train('t', acceptance='gate')
        await asyncio.sleep(0.05)
        return res, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    res, left = asyncio.run(go())
    assert left == [] and _training_calls(r, res.internal_run_id).height == 300

def test_budget_is_refused_before_the_call():
    b = CallBudget(2)
    token = CALL_BUDGET.set(b)
    try:
        from treetrm.llm.ledger import RecordedProvider
        from treetrm.sim.roles import SimEcho
        rows = []
        p = RecordedProvider(SimEcho(), 'agent', rows.append)
        msgs = [{'role': 'user', 'content': 'hi'}]
        asyncio.run(p.chat(msgs))
        asyncio.run(p.chat(msgs))
        with pytest.raises(BudgetError): asyncio.run(p.chat(msgs))
        assert len(rows) == 2 and b.used == 2
    finally: CALL_BUDGET.reset(token)


@pytest.mark.slow
def test_budget_binds_over_http(tmp_path, world, monkeypatch):
    "On the openai backend (the sim server over real HTTP) every role's calls take from the budget too."
    from treetrm.sim.server import serve
    cfg = dict(epochs=50, patience=50, min_ladder_units=4, max_calls=137, deliver='current',
               batch=dict(batch_size=8, min_class=4, correct_ratio=0.2))
    with serve(world_dir=world, seed=0) as srv:
        for role in ('agent', 'judge', 'evolver'):
            for key, value in (('MODEL', f'sim-{role}'), ('BASE_URL', srv.base_url), ('API_KEY', 'sk-dummy')):
                monkeypatch.setenv(f'TREETRM_{role.upper()}_{key}', value)
        r = Runner(tmp_path/'ws', backend='openai', data_dir=world, config=cfg, split_config=SPLIT, concurrency=4,
                   progress=False)
        res = asyncio.run(r.train('b', acceptance='greedy'))
    calls = _training_calls(r, res.internal_run_id)
    assert calls.height == 137 and set(calls['role'].unique()) >= {'agent', 'judge'}
    spent = [d for d in res.state.decisions if d['kind'] == 'budget']
    assert len(spent) == 1 and spent[0]['calls'] == 137
