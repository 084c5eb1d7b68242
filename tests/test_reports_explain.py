"""Reports that explain themselves (issue 32, item 6): a step that gives a task type no proposal says why in the
decision log and the step report; types too small to gate are named with their validation units when training starts;
a shadow rule that could not decide says how many units it needed and had; the step report states delta_shrunk's
prior. Trained through `Runner.train(show=True)` on a small sim world where one type is too small to gate."""
import asyncio, contextlib, io

import polars as pl
import pytest

from treetrm.train.runner import Runner
from treetrm.sim.world import make_world
from treetrm import report

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

TYPES = {'Counting Problem': 2, 'OCR Problems': 1}  # OCR has half Counting's validation units: it can be left ungated
SPLIT = {'val_wrong_min': 0, 'epsilon': 1.0}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "One epoch where Counting is gated and OCR is not: (runner, result, units per type, the bar, what train printed)."
    root = tmp_path_factory.mktemp('explain')
    world = make_world(root/'world', seed=3, n_videos=40, questions_per_video=TYPES)
    r = Runner(root/'ws', backend='sim', data_dir=world, progress=False, concurrency=4,
               config={'split': SPLIT, 'train': {'epochs': 1, 'min_ladder_units': 1,
                                                   'batch': {'batch_size': 8, 'min_class': 1}}})
    asyncio.run(r.split())
    sizes = r.check_trainable()  # after the split: the validation units per type
    need = max(sizes.values())  # the gate takes Counting, the bigger type, and leaves OCR out
    assert sizes['OCR Problems'] < need
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed): res = asyncio.run(r.train('v1', show=True, min_ladder_units=need))
    yield r, res, sizes, need, printed.getvalue()
    r.log.close()


def test_types_too_small_to_gate_are_named_with_their_units(trained):
    r, res, sizes, need, printed = trained
    assert (f'Not gated (fewer than train.min_ladder_units = {need} validation units): '
            f'OCR Problems ({sizes["OCR Problems"]} units)') in printed


def test_a_type_without_a_proposal_says_why_at_every_step(trained):
    r, res, sizes, need, printed = trained
    decisions = res.state.decisions
    steps = {d['gate_id'] for d in decisions if d['kind'] in ('step', 'gate', 'proposal')}
    assert steps
    for gid in steps:  # every task type of the step's batch has a decision of its own
        batch = res.state.batches[int(gid.split('s')[1]) - 1] if len(res.state.batches) else []
        types = {r.by_id[q].task_type for q in batch}
        assert types <= {d['task_type'] for d in decisions if d['gate_id'] == gid}, gid
    ocr = [d for d in decisions if d['task_type'] == 'OCR Problems']
    assert ocr and all(d['kind'] == 'step' and d['decision'] == 'not_gated' for d in ocr), ocr
    assert {d['reason'] for d in ocr} == {
        f'not gated: {sizes["OCR Problems"]} validation units, below train.min_ladder_units = {need}'}
    assert 'reason' in printed  # the step report's decision table has the column


def test_shadow_rules_that_could_not_decide_say_why(trained):
    r, res, sizes, need, printed = trained
    gates = report.gate_table(r.log, res.internal_run_id)
    cells = [v for c in gates.columns if c.startswith('shadow_') for v in gates[c].drop_nulls().to_list()]
    unavailable = [v for v in cells if v.startswith('unavailable')]
    assert unavailable, cells  # the gate stopped before the fixed-n test's whole ladder at least once
    assert all(v.startswith('unavailable: needs ') and 'the gate stopped after' in v for v in unavailable)


def test_the_step_report_states_the_prior_of_delta_shrunk(trained):
    r, res, sizes, need, printed = trained
    assert 'normal prior on true changes with sd tau = 0.05 (5 points)' in printed
