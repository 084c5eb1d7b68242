"""Filling a server (issue 50, item 3): the benchmark's arms against one OpenAI-compatible server over real HTTP — the
sim server here, llama.cpp's llama-server in the committed measurement — answer every question, each with its own
endpoint settings, and read the cached tokens the server reports (the sim server reports 0: it has no cache)."""
import asyncio, json

import pytest

from treetrm.core import project_root
from treetrm.sim.world import make_world
from treetrm.bench.scale import sim_servers
from treetrm.bench.server_fill import FILL_ARMS, OLD_DEFAULTS, server_fill

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py


def test_every_arm_answers_its_own_questions_with_its_own_endpoint_settings(tmp_path):
    world = make_world(tmp_path/'world', seed=5, n_videos=4)  # 12 questions: 3 arms x 2 rounds x 2
    with sim_servers(1, 0.01, world) as ((_, url), ):
        result = asyncio.run(server_fill(url, 'sim-agent', world, project_root()/'prompts'/'skills', per_run=2,
                                         rounds=2, max_steps=3))
    runs = result['runs']
    assert [(r['round'], r['arm']) for r in runs][:3] == [(0, a.label) for a in FILL_ARMS]
    assert all(r['answered'] == r['questions'] == 2 and r['errors'] == 0 for r in runs)
    assert all(r['cached_tokens'] == 0 and r['cached_share'] == 0.0 and r['prompt_tokens'] > 0 for r in runs)
    widths = {r['arm']: r['final_width'] for r in runs}
    assert widths[OLD_DEFAULTS.label] == 8  # fixed
    assert all(w <= 64 for w in widths.values())
    summary = {s['arm']: s for s in result['summary']}
    assert summary[OLD_DEFAULTS.label]['ratio_to_first'] == [1.0, 1.0]


RESULT = project_root()/'nbs'/'bench'/'results'/'throughput-server-2026-12-07.json'


def test_the_committed_measurement_holds_together():
    ("The llama.cpp server reported cached tokens in every run, and the summary's ratios are the runs' (the benchmark "
     "page's table is `fill_markdown` of this JSON, made at docs build time).")
    result = json.loads(RESULT.read_text())
    assert [s['arm'] for s in result['summary']] == [a.label for a in FILL_ARMS]  # old defaults first: the ratios' base
    assert all(r['cached_tokens'] > 0 for r in result['runs'])  # the server's prefix cache served part of every run
    rate = {(r['round'], r['arm']): r['questions_per_s'] for r in result['runs']}
    for s in result['summary']:  # the ratios recomputed from the runs, round by round
        want = [round(rate[(k, s['arm'])] / rate[(k, OLD_DEFAULTS.label)], 3) for k in range(result['rounds'])]
        assert s['ratio_to_first'] == want
