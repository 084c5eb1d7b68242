("The train stage's forecast against what the run spent: the README's quick start (the demo world, the default "
 "settings) spends between the forecast's two cases, every edit a real fix and no edit confirmed; the forecast says "
 "what it assumed; its bound holds under a binding hard budget; the share of real fixes it ships recovers the share "
 "the sim's evolver plants.")
import asyncio

import pytest

from treetrm.core import from_root, read_json
from treetrm.sim.roles import SimEvolver
from treetrm.train.edit_prior import REAL_EDIT_SHARE, REAL_EDIT_SHARE_FILE
from treetrm.train.runner import Runner

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

ROLES = ('agent', 'judge', 'evolver')


@pytest.fixture(scope='module')
def quick_start(tmp_path_factory):
    "The README's quick start in Python: `Runner(ws, backend='sim').train('v1')` on the demo world, default settings."
    runner = Runner(tmp_path_factory.mktemp('quick_start')/'ws', backend='sim', progress=False)
    return runner, asyncio.run(runner.train('v1'))


def test_quick_start_spends_between_the_forecast_cases(quick_start):
    "Every edit a real fix is the least a run spends, none confirmed the most (before a budget): the demo is between."
    _, res = quick_start
    f, actual = res.metrics['forecast'], res.metrics['actual']
    for role in ROLES:
        least = f['if_every_edit_fixes']['roles'][role]['calls']
        most = f['if_nothing_confirmed']['roles'][role]['calls']
        assert least <= actual[role]['calls'] <= most, (role, least, actual[role]['calls'], most)
        assert least <= f['roles'][role]['calls'] <= most, role  # the expected case mixes the two


def test_forecast_says_what_it_assumed(quick_start):
    _, res = quick_start
    a = res.metrics['forecast']['assumptions']
    passes = a['passes']
    assert passes['validation'] == 0 and passes['test'] == 130  # no R pass while nothing is on probation; one test
    assert a['measured_on'] == 'baseline' and a['agent_calls_per_question'] > 1
    assert a['edit_class'] == 'easy' and a['real_share'] == REAL_EDIT_SHARE['easy']  # the demo world's profile
    gated = res.metrics['gated_task_types']
    assert sorted(a['gates']) == gated  # every gated type of the demo: its gate's expectation, and whence
    for g in a['gates'].values():
        assert 20 <= g['units'] <= 60 and 0 < g['confirm'] <= 1 and 0 < g['fixes'] <= 1 and 0 < g['flippy'] <= 1
        assert g['confirm_if_null'] < g['confirm_expected'] < g['confirm']  # a mixture of a null edit and a fix
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


def test_shipped_share_recovers_the_planted_one():
    """The easy worlds' evolver proposes a helpful rule with chance p_helpful (0.5), a neutral or trap rule otherwise:
    the share fitted on the tuning worlds' gates must find it. Tolerance: 3 binomial standard errors of a share over the
    fit's gates (each gate tells real from null only in part, so this is generous, never tight)."""
    fit = read_json(from_root(REAL_EDIT_SHARE_FILE))['classes']['easy']
    planted, n = SimEvolver().p_helpful, fit['gates']
    assert n >= 30
    assert abs(REAL_EDIT_SHARE['easy'] - planted) <= 3 * (planted * (1 - planted) / n) ** 0.5
