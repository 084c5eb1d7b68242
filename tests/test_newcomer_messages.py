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
            if d['gate_id'] == gid and d['task_type'] not in batch:  # a type the batch did not draw says so
                assert d['kind'] == 'step' and d['reason'], d
    absent = [d for d in res.state.decisions if d['decision'] == 'not_in_batch']
    assert absent and {d['reason'] for d in absent} == {"not in this step's batch: none of its questions was drawn"}
