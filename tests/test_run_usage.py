"""What a run spent (issue 50, item 1): calls and tokens per answered question, the share a server's prefix cache
served and wall time, per stage, in metrics.json and the final report; recounted here from harness.db with SQL of its
own. The sim backend has no prefix cache and says so: its cached share is 0, not empty."""
import asyncio

import pytest

from treetrm.train.runner import Runner
from treetrm.sim.world import make_world

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp('usage')
    world = make_world(root/'world', seed=2, n_videos=24, questions_per_video={'Counting Problem': 2})
    r = Runner(root/'ws', backend='sim', data_dir=world, progress=False, concurrency=4,
               config={'split': {'val_wrong_min': 0, 'epsilon': 1.0},
                       'train': {'epochs': 1, 'min_ladder_units': 1, 'batch': {'batch_size': 8, 'min_class': 1}}})
    res = asyncio.run(r.train('v1'))
    yield r, res
    r.log.close()


def recount(log, runs: list[str]) -> dict:
    "The stage's numbers straight from harness.db."
    marks = ','.join('?' * len(runs))
    answered = log.query(f'SELECT count(*) FROM predictions WHERE run_id IN ({marks})', tuple(runs)).item()
    calls, prompt, completion, cached = log.query(
        'SELECT count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens) FROM llm_calls '
        f"WHERE run_id IN ({marks}) AND status NOT IN ('sent', 'cancelled')", tuple(runs)).row(0)
    return dict(answered=answered, calls=calls, tokens=prompt + completion, cached=cached)


def test_metrics_json_holds_each_stage_per_answered_question(trained):
    r, res = trained
    usage = {row['stage']: row for row in res.metrics['usage']}
    assert list(usage) == ['split', 'train']
    runs = {'split': ['baseline', 'baseline-redraw'], 'train': r.run_ids(res.internal_run_id)}
    for stage, row in usage.items():
        n = recount(r.log, runs[stage])
        assert n['answered'] > 0 and n['calls'] > n['answered']  # every answer took at least one call
        assert (row['answered'], row['calls']) == (n['answered'], n['calls'])
        assert row['tokens_per_answer'] == round(n['tokens'] / n['answered'], 1)
        assert row['calls_per_answer'] == round(n['calls'] / n['answered'], 1)
        assert n['cached'] == 0 and row['cached_tokens'] == 0 and row['cached_share'] == 0.0  # the sim has no cache
        assert row['wall_s'] > 0


def test_the_final_report_shows_the_stages_with_the_note(trained):
    r, res = trained
    final = r.final_report(res)
    assert final['usage']['stage'].to_list() == ['split', 'train']
    assert {'tokens_per_answer', 'calls_per_answer', 'cached_share', 'wall_s'} <= set(final['usage'].columns)
    assert 'the sim backend has no cache: 0' in final['usage_note']
