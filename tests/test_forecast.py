("The train stage's forecast against what the run spent: the README's quick start (the demo world, the default "
 "settings), each role's calls within 30% of the forecast; the forecast's bound holds under a binding hard budget; "
 "its assumptions are stated.")
import asyncio

import pytest

from treetrm.train.runner import Runner

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

ROLES = ('agent', 'judge', 'evolver')
WITHIN = 0.30  # the bar: each role's forecast calls within 30% of the actual calls


def off_by(metrics: dict) -> dict:
    "role -> (forecast calls, actual calls, |forecast - actual| / actual) of a finished run."
    f, a = metrics['forecast']['roles'], metrics['actual']
    return {r: (f[r]['calls'], a[r]['calls'], abs(f[r]['calls'] - a[r]['calls']) / a[r]['calls']) for r in ROLES}


@pytest.fixture(scope='module')
def quick_start(tmp_path_factory):
    "The README's quick start in Python: `Runner(ws, backend='sim').train('v1')` on the demo world, default settings."
    runner = Runner(tmp_path_factory.mktemp('quick_start')/'ws', backend='sim', progress=False)
    return runner, asyncio.run(runner.train('v1'))


def test_quick_start_forecast_is_within_30_percent_per_role(quick_start):
    _, res = quick_start
    off = off_by(res.metrics)
    assert all(share <= WITHIN for _, _, share in off.values()), off


def test_forecast_says_what_it_assumed(quick_start):
    _, res = quick_start
    a = res.metrics['forecast']['assumptions']
    passes = a['passes']
    assert passes['validation'] == 0 and passes['test'] == 130  # no R pass while nothing is on probation; one test
    assert a['measured_on'] == 'baseline' and a['agent_calls_per_question'] > 1
    gated = res.metrics['gated_task_types']
    assert sorted(a['gates']) == gated  # every gated type of the demo: its gate's expectation, and whence
    for g in a['gates'].values():
        assert 20 <= g['units'] <= 60 and 0 < g['confirm'] <= 1 and 0 < g['fixes'] <= 1
        assert g['source'].startswith('measured')
    assert {'redraws', 'edits', 'gates', 'batches', 'validation', 'not_modelled'} <= set(a['model'])


def test_bound_holds_under_a_binding_hard_budget(quick_start):
    "Another run of the same workspace under max_calls: each role spends at most the forecast's bound."
    runner, _ = quick_start
    res = asyncio.run(runner.train('b', max_calls=300))
    forecast, actual = res.metrics['forecast'], res.metrics['actual']
    assert res.metrics['decisions'].get('budget:spent') == 1  # the budget ended training
    for role in ROLES:
        assert actual[role]['calls'] <= forecast['at_most']['roles'][role]['calls'], role
    assert forecast['at_most']['training_calls'] > 300  # so the bar counts calls

