"""Training on a benchmark of one's own (issue 32, item 3): with the default `sim` backend, trees built from videos
have no planted world, and the stage refuses them before any work, saying why and what to use instead; a benchmark
too small to split or to gate any task type is refused before anything is paid for, with the minimum in the error."""
import asyncio

import papermill as pm
import pytest

from treetrm.build.builder import build_trees
from treetrm.core import ConfigError, project_root
from treetrm.log import HarnessLog
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world
from treetrm.build.video import make_synthetic_videos

pytestmark = [pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = project_root()


def train_notebook(tmp_path, **params):
    "Run nbs/train.ipynb; the ConfigError it stops with (ename, message)."
    with pytest.raises(pm.PapermillExecutionError) as e:
        pm.execute_notebook(str(ROOT/'nbs'/'train.ipynb'), str(tmp_path/'out.ipynb'), parameters=params,
                            kernel_name='python3', cwd=str(ROOT/'nbs'), progress_bar=False)
    return e.value.ename, e.value.evalue


def calls_and_rows(ws) -> tuple[int, int]:
    "(model calls, predictions) recorded in a workspace's harness.db (0, 0 when there is none)."
    if not (ws/'harness.db').exists(): return 0, 0
    log = HarnessLog(ws/'harness.db')
    return log.frame('llm_calls').height, log.frame('predictions').height


def test_sim_backend_refuses_built_trees_before_any_work(tmp_path):
    videos = make_synthetic_videos(tmp_path/'videos', n_videos=3, n_shots=2, seconds=6.0)
    trees = tmp_path/'mine'/'trees'
    asyncio.run(build_trees(videos, trees, progress=False))
    ws = tmp_path/'ws'
    ename, message = train_notebook(tmp_path, workspace=str(ws), trees_dir=str(trees),
                                    questions=str(videos/'questions.jsonl'), run_id='v1')
    assert ename == 'ConfigError', (ename, message)
    assert 'world.json' in message and "backend='openai'" in message and 'sim.server world' in message
    assert not ws.exists()  # refused before the workspace was made


def test_benchmark_too_small_to_gate_is_refused_before_the_split(tmp_path):
    world, ws = make_world(tmp_path/'world', seed=0, n_videos=8), tmp_path/'ws'
    ename, message = train_notebook(tmp_path, workspace=str(ws), data_dir=str(world), run_id='v1')  # default: 60 units
    assert ename == 'ConfigError', (ename, message)
    assert 'min_ladder_units=60' in message and 'about 100 units of one type' in message
    assert not ws.exists()  # refused before anything was written: no baseline was paid for
    runner = Runner(ws, data_dir=world, progress=False)  # Runner.train itself checks first too
    with pytest.raises(ConfigError, match='too small to train on'): asyncio.run(runner.train('v1'))
    assert not ws.exists()


def test_split_needs_three_videos_before_the_baseline(tmp_path):
    world, ws = make_world(tmp_path/'world', seed=0, n_videos=2), tmp_path/'ws'
    runner = Runner(ws, data_dir=world, progress=False)
    with pytest.raises(ConfigError, match=r'has 2 videos; the split needs at least 3 \(one for each'):
        asyncio.run(runner.split())
    assert not ws.exists()  # refused before the workspace was made
