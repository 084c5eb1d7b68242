"""Issue 49: the noise of a model that knows answers, beside SmolLM2-135M's, and one real training run on it.

The comparison in the JSON is made again from the two committed draws files; the world settings' sources cite the
measured numbers. (The tables made from these JSONs are the docs' benchmark pages, made by the same functions at build
time: `noise_compare_markdown`, `noise_moves`, `noise_speed_markdown`, `real_run_markdown`.)"""
import json

import polars as pl
import pytest

from treetrm.bench.noise import compare_noise, draws_frame, read_draws, noise_design, compared_frame
from treetrm.core import project_root
from treetrm.sim.realism import SOURCES

ROOT = project_root()
RESULTS = ROOT/'nbs'/'bench'/'results'
NOISE = RESULTS/'noise-2026-12-07-qwen05b.json'


def measured() -> dict: return json.loads(NOISE.read_text())


def compared(m: dict) -> pl.DataFrame: return compared_frame(m['compared_with']['rows'])


def test_the_measurement_holds_every_draw_of_its_design():
    m = measured()
    draws = read_draws(ROOT/m['draws'])
    one_call = len(noise_design(m['temperatures']))
    tools = len(noise_design(m['temperatures'], seeds_at_zero=1, probe=False))
    assert len(draws) == m['n_questions'] * one_call + m['n_tool_questions'] * tools
    assert {d['question_id'] for d in draws if d['agent'] == 'tools'} <= {d['question_id'] for d in draws}


@pytest.mark.slow
def test_the_comparison_is_made_again_from_the_two_draws_files():
    m = measured()
    again = compare_noise(draws_frame(read_draws(ROOT/m['compared_with']['draws'])),
                          draws_frame(read_draws(ROOT/m['draws'])))
    kept = compared(m)
    assert again.select('agent', 'temperature', 'edit', 'rate', 'questions').equals(
        kept.select('agent', 'temperature', 'edit', 'rate', 'questions'))
    for col in ('a', 'b', 'diff', 'diff_lo', 'diff_hi'):
        x, y = again[col].fill_nan(None).to_list(), kept[col].fill_nan(None).to_list()
        assert all((u is None and v is None) or abs(u - v) < 1e-9 for u, v in zip(x, y)), col


def test_the_world_sources_cite_the_knowing_model():
    "The settings a measurement informs name the 0.5B model's value, rounded as the noise page's table rounds it."
    cmp = compared(measured())
    at = lambda agent, t, rate: cmp.filter((pl.col('agent') == agent) & (pl.col('temperature') == t)
                                           & (pl.col('edit') == 'null') & (pl.col('rate') == rate)).row(0, named=True)
    assert f"{100 * at('one_call', 0.7, 'flip_base')['b']:.1f}%" in SOURCES['flip_rate']
    assert f"{100 * at('one_call', 0.0, 'flip_base')['b']:.1f}%" in SOURCES['seed_flips']
    assert f"{at('one_call', 0.0, 'idiosyncrasy')['b']:+.3f}" in SOURCES['idiosyncrasy']
    assert f"{at('one_call', 0.7, 'coupling')['b']:+.2f}" in SOURCES['coupling']


@pytest.mark.slow
@pytest.mark.notebooks
def test_the_real_run_notebook_reads_a_trained_workspace(tmp_path):
    "nbs/bench/real_run.ipynb through papermill on a workspace trained on a small sim world: it writes the JSON."
    import asyncio
    import papermill as pm
    from treetrm.sim.world import small_world
    from treetrm.train.runner import Runner
    split = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
    config = dict(epochs=1, min_ladder_units=8, batch=dict(batch_size=8, min_class=2, correct_ratio=0.2))
    runner = Runner(tmp_path/'ws', data_dir=small_world(tmp_path/'world'), split_config=split, config=config,
                    concurrency=4, progress=False)
    res = asyncio.run(runner.train('r1'))
    out = tmp_path/'real-run.json'
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'real_run.ipynb'), str(tmp_path/'out.ipynb'), kernel_name='python3',
                        cwd=str(ROOT/'nbs'/'bench'), progress_bar=False,
                        parameters=dict(workspace=str(tmp_path/'ws'), run_id='r1', model='sim', notes=['read'],
                                        out=str(out)))
    s = json.loads(out.read_text())
    assert s['model'] == 'sim' and s['notes'] == ['read'] and s['test']['n'] == res.metrics['test']['n']
    assert len(s['decisions']) == len(res.state.decisions)
