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
