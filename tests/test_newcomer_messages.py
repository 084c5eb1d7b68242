"""What a newcomer tripped on (issue 51), the messages part: a sim benchmark whose questions are not the world's
(item 6), a second `again=True` evaluation that reread the first (item 12), step reports that dropped task types
(item 14), `fresh=True` archiving in silence (item 18), and the smaller items of 20: a cost of 0.0 beside "no price
set", refusals that wrote the workspace first, the sim vision's "mostly grey" meadow."""
import asyncio, contextlib, io, re, warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from treetrm.data import SHARED_TASK
from treetrm.core import ConfigError, InfraError
from treetrm.data import load_questions
from treetrm.llm.costs import NO_PRICE
from treetrm.sim.world import make_world
from treetrm.train.runner import Runner

SPLIT = {'val_wrong_min': 0, 'epsilon': 1.0}  # a small world's split: no floor on wrong answers, no share bound


@pytest.fixture(scope='module')
def worlds(tmp_path_factory):
    "Two planted worlds of 3 videos each: a benchmark of one is not the other's."
    root = tmp_path_factory.mktemp('worlds')
    return make_world(root/'a', seed=4, n_videos=3), make_world(root/'b', seed=5, n_videos=3)


# item 6: a data_dir whose world lacks the questions passed the up-front check, froze pools on 6 of 6 error answers,
# and failed in train advising to check TREETRM_AGENT_BASE_URL and the key
def test_a_sim_benchmark_of_other_questions_is_refused_before_anything_is_written(worlds, tmp_path):
    a, b = worlds
    mine = load_questions(b/'questions.jsonl')
    with pytest.raises(ConfigError) as e:
        Runner(tmp_path/'ws', data_dir=a, questions=b/'questions.jsonl', trees_dir=b/'trees', progress=False)
    said = str(e.value)
    assert f'{len(mine)} of {len(mine)} questions are not questions of the sim world in {a}' in said, said
    assert repr(mine[0].question_id) in said and f'file={b/"questions.jsonl"}' in said, said  # which, and where
    assert 'data_dir alone' in said and "backend='openai'" in said, said  # what to do
    assert not (tmp_path/'ws').exists()
    Runner(tmp_path/'ws', data_dir=a, progress=False)  # the world's own benchmark passes
    assert not (tmp_path/'ws').exists()  # and nothing is written before a stage needs the workspace


def test_answers_that_are_all_errors_name_the_recorded_cause(worlds, tmp_path):
    from treetrm.sim.roles import make_role
    from treetrm.train.run import guard_infra
    from treetrm.train.workspace import AgentSetup
    a, b = worlds
    # the providers argument bypasses the backend's data check: an agent of world b asked world a's questions
    r = Runner(tmp_path/'ws', data_dir=a, progress=False, concurrency=4,
               providers={'agent': make_role('sim-agent', b), 'judge': make_role('sim-judge', b)})
    qs = r.questions[:6]
    res = asyncio.run(r.answer(qs, 'r', AgentSetup(skills_version='v1', progress=False)))
    assert res.stop_reason_counts == {'error': 6}
    cause = "the question is not one of this world's questions"  # what the simulated agent raised, as llm_calls has it
    assert r.log.frame('llm_calls').filter(pl.col('status') == 'error')['error'].str.contains(cause).all()
    for said in (res.health, r.run_health('r')):
        assert cause in said and '6 call(s)' in said, said
        assert 'TREETRM_AGENT_BASE_URL' not in said, said  # no endpoint was involved
    with pytest.raises(InfraError) as e:
        guard_infra(r.log.predictions('r'), 0.5, 'r', r.log)
    assert cause in str(e.value) and 'TREETRM_AGENT_BASE_URL' not in str(e.value), str(e.value)
    r.log.close()


# item 20: a dry run, a benchmark too small to train on and a misspelt version word wrote the workspace first
def test_refusals_and_a_dry_run_write_nothing(worlds, tmp_path):
    from treetrm.split.stage import SplitPlan
    a, _ = worlds
    ws = tmp_path/'ws'
    r = Runner(ws, data_dir=a, progress=False, config={'split': SPLIT})
    with contextlib.redirect_stdout(io.StringIO()) as printed: plan = asyncio.run(r.split(dry_run=True))
    assert isinstance(plan, SplitPlan) and 'split plan' in printed.getvalue()
    with pytest.raises(ConfigError, match='too small to train on'): r.check_trainable()  # 3 videos, 60 units asked
    with pytest.raises(ConfigError, match="did you mean 'best'"): r.resolve_version('bset')
    with pytest.raises(ConfigError, match='epochs'): Runner(ws, data_dir=a, config={'epochs': 0})
    assert not ws.exists()
    assert r.resolve_version('seed') == 'v1' and (ws/'harness.db').is_file()  # a stage that needs it makes it


# item 20: the sim vision called a green meadow "mostly grey" (the colour of the mean pixel)
def test_the_sim_vision_names_a_meadow_green():
    from treetrm.build.video import jpeg_bytes
    from treetrm.sim.sim_vision import SIM_VISION_REPLIES, look
    rng = np.random.default_rng(0)
    sky = np.full((80, 320, 3), (135, 180, 235.))  # a third of light blue sky over two thirds of textured grass
    grass = (70, 120, 40) + rng.normal(0, 20, (160, 320, 3))
    meadow = jpeg_bytes(Image.fromarray(np.clip(np.concatenate([sky, grass]), 0, 255).astype(np.uint8)))
    # its mean pixel, about (92, 140, 105), is nearer the named grey (128, 128, 128) than the named green (30, 160, 60)
    assert look(meadow)['colour'] == 'green'
    assert SIM_VISION_REPLIES['event']({}, [look(meadow)] * 2)['event_description'] == '2 frames, mostly green.'


# item 20: a cost table read 0.0 for a role without a price
def test_a_cost_table_says_no_price_set_where_a_role_has_none():
    from treetrm.train.runner import priced_costs
    table = pl.DataFrame(dict(role=['agent', 'judge', 'ALL'], calls=[10, 2, 12], cost=[0.0, 0.25, 0.25]))
    assert priced_costs(table, set()).equals(table)  # every role priced: the numbers
    assert priced_costs(table, {'agent'})['cost'].to_list() == [NO_PRICE, '0.2500', '0.2500 (priced roles)']
    assert priced_costs(table, {'agent', 'judge'})['cost'].to_list() == [NO_PRICE] * 3


# item 12: a second `again=True` evaluation reused the first one's stored answers and was labelled "a new draw"
@pytest.mark.slow
def test_two_evaluations_again_are_two_draws(tmp_path):
    from treetrm.train.workspace import AgentSetup
    world = make_world(tmp_path/'world', seed=0, n_videos=8)
    r = Runner(tmp_path/'ws', data_dir=world, progress=False, concurrency=4, config={'split': SPLIT})
    asyncio.run(r.split(redraw_questions=0))
    test = r.pool('test')
    final = 't1_final_test'  # what a training run's final test of the seed skills records
    asyncio.run(r.answer(test, final, AgentSetup(kind='final_test', skills_version='v1', progress=False)))
    r.log.finish_run(final)
    calls = lambda rid: r.log.frame('llm_calls').filter(pl.col('run_id') == rid).height
    with warnings.catch_warnings(record=True):
        first = asyncio.run(r.evaluate('seed', again=True))
        before = calls(first.run_id)
        second = asyncio.run(r.evaluate('seed', again=True))
    assert (first.run_id, second.run_id) == ('eval_test_v1', 'eval_test_v1-draw2')
    assert calls(first.run_id) == before and calls(second.run_id) > 0  # the second asked the model, its own run
    assert 'a new draw of the same pool (run eval_test_v1-draw2, look 3' in second.label
    # the sim draws each answer with the request seed, which follows the run id: two draws differ somewhere
    a, b = (r.log.predictions(x.run_id).sort('question_id')['prediction'] for x in (first, second))
    assert len(a) == len(b) == len(test) and (a != b).any()
    r.log.close()


# items 14, 18 and 20 on one small training run and a fresh attempt of it
TYPES = {'Counting Problem': 1, 'OCR Problems': 1, 'Action Recognition': 1, 'Temporal Reasoning': 1}
TRAIN = {'split': SPLIT, 'train': {'epochs': 1, 'min_ladder_units': 1, 'batch': {'batch_size': 4, 'min_class': 1}}}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "A run v1 (show=True) and its fresh attempt on a 16-video world of 4 types: (runner, results, what each printed)."
    root = tmp_path_factory.mktemp('trained')
    world = make_world(root/'world', seed=3, n_videos=16, questions_per_video=TYPES)
    r = Runner(root/'ws', data_dir=world, progress=False, concurrency=4, config=TRAIN)
    printed = []
    for fresh in (False, True):
        with contextlib.redirect_stdout(io.StringIO()) as out: res = asyncio.run(r.train('v1', show=True, fresh=fresh))
        printed.append((res, out.getvalue()))
    yield r, printed
    r.log.close()


@pytest.mark.slow
def test_every_step_report_lists_every_task_type(trained):
    r, printed = trained
    (res, said), _ = printed
    steps = sorted({d['gate_id'] for d in res.state.decisions if d['kind'] in ('step', 'gate', 'proposal')})
    assert steps
    for gid in steps:
        table = said.split(f'v1 · step {gid}\ndecisions\n', 1)[1].split('\n\n', 1)[0]  # the step report as printed
        shown = {t for t in TYPES if re.search(rf'│ {t}\s+┆', table)}
        assert shown == set(TYPES), (gid, table)
        batch = {r.by_id[q].task_type for q in res.state.batches[int(gid.split('s')[1]) - 1]}
        for d in res.state.decisions:
            if d['gate_id'] == gid and d['task_type'] not in batch | {SHARED_TASK}:  # an undrawn type says so
                assert d['kind'] == 'step' and d['reason'], d
    absent = [d for d in res.state.decisions if d['decision'] == 'not_in_batch']
    assert absent and {d['reason'] for d in absent} == {"not in this step's batch: none of its questions was drawn"}


# item 18: `-p fresh True` archived the old run silently, and the new draw (0.877 against 0.969) came without a
# note
@pytest.mark.slow
def test_a_fresh_attempt_says_where_the_old_one_went_and_that_it_is_a_new_draw(trained):
    r, printed = trained
    (first, _), (again, said) = printed
    assert (first.internal_run_id, again.internal_run_id) == ('v1', 'v1~2')
    old = first.metrics['test']['delivered_accuracy']
    assert (f"fresh=True: the earlier attempt v1 (finished, test accuracy {old:.3f} with "
            f"{first.metrics['delivered_version']}) is archived in {r.workspace/'runs'/'v1.archived-1'}") in said, said
    assert 'This attempt, v1~2, is a new draw' in said
    new = again.metrics['test']['delivered_accuracy']
    note = r.final_report(again)['new_draw']
    assert note.startswith(f'a new draw: v1~2 is attempt 2 of run v1 (fresh=True), test accuracy {new:.3f}'), note
    assert f'{new - old:+.3f} against v1' in note and 'not the best' in note, note
    assert note in said  # the end of training says it too
    assert 'new_draw' not in r.final_report(first)  # a run's only attempt is no new draw


# item 20: the forecast said "no price set" and the actual cost beside it read 0.0
@pytest.mark.slow
def test_a_cost_without_a_price_reads_no_price_set_beside_the_forecast(trained):
    r, printed = trained
    (res, said), _ = printed
    table = r.final_report(res)['forecast_vs_actual']
    assert table['forecast_cost'].to_list() == table['actual_cost'].to_list() == [NO_PRICE] * 3
    assert all(u['cost'] is None for u in res.metrics['actual'].values())  # metrics.json: null, as the forecast
    assert r.final_report(res)['cost']['cost'].to_list() == [NO_PRICE] * 4  # agent, judge, evolver, ALL
    # calls, prompt, cached and completion tokens, tokens, then the cost
    costs = re.findall(r'│ (?:agent|judge|evolver|ALL)\s+┆ \d+\s+┆ \d+\s+┆ \d+\s+┆ \d+\s+┆ \d+\s+┆ ([^┆]+?)\s+┆', said)
    assert costs and set(costs) == {NO_PRICE}, costs  # every step's cost table as printed
