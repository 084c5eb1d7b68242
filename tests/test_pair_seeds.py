"""Paired request seeds (issue 33, item 3): with `pair_seeds` a gate's base and candidate arms ask each question with
one seed, so a seeded sampler couples them; without it (the default) every arm's seeds come from its own run id."""
import asyncio, json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from treetrm.core import sha256_text
from treetrm.bench.loop_bench import DEFAULT_GRID_SPLIT
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world, world_questions
from treetrm.sim.sim_agent import SimAgent, read_conversation, conversation_question
from treetrm.sim.roles import SimJudge, SimEvolver

WORLD = dict(profile='realistic', n_videos=50, questions_per_video={'Counting Problem': 2, 'OCR Problems': 2},
             realism=dict(effects='rich', flip_rate=0.2, coupling=1.0))
TRAIN = dict(epochs=3, patience=3, min_ladder_units=20, max_calls=900, deliver='current',
             batch=dict(batch_size=16, min_class=4, correct_ratio=0.2))

@dataclass
class Recording(SimAgent):
    "The one-call sim agent, noting (question, skill text, request seed) of every call."
    calls: list = field(default_factory=list)
    async def chat(self, messages, *, seed=None, **kw):
        c = read_conversation(messages)
        q = conversation_question(world_questions(self.world_dir), c)
        self.calls.append((q.question_id, sha256_text(c.skill_text), seed))
        return await super().chat(messages, seed=seed, **kw)

def _train(root:Path, world:Path, pair_seeds:bool):
    agent = Recording(world, 0, one_call=True)
    r = Runner(root/'ws', data_dir=world, config=TRAIN | dict(pair_seeds=pair_seeds), split_config=DEFAULT_GRID_SPLIT,
               seed=0, concurrency=1, progress=False,
               providers={'agent': agent, 'judge': SimJudge(world, 0), 'evolver': SimEvolver(world, 0)})
    async def go():
        await r.split()
        return await r.train('pairs', acceptance='gate')
    res = asyncio.run(go())
    return agent.calls, [d for d in res.state.decisions if d['kind'] == 'gate'], res.path

def _shared_seeds(calls) -> int:
    "(question, seed) pairs asked with two or more skill texts."
    texts = defaultdict(set)
    for qid, text, seed in calls: texts[qid, seed].add(text)
    return sum(len(t) >= 2 for t in texts.values())

def test_pair_seeds_give_both_arms_one_seed_per_question(tmp_path):
    world = make_world(tmp_path/'world', seed=2, **WORLD)
    calls_on, gates_on, dir_on = _train(tmp_path/'on', world, True)
    calls_off, gates_off, dir_off = _train(tmp_path/'off', world, False)
    assert gates_on and gates_off  # edits were judged both ways
    # Off: a seed names its arm's run, so two texts never meet on one seed (a collision of 64-bit seeds aside).
    assert _shared_seeds(calls_off) == 0
    # On: a judged edit pairs at least the units up to its first exit (the futility look at a fifth of a ladder of at
    # least 40 units: 8), each with its base arm asked on the candidate's seed.
    assert _shared_seeds(calls_on) >= 8
    # The run says whether the endpoint honours seeds (the sim agent does: same seed, same reply); only when asked.
    assert json.loads((dir_on/'seed_probe.json').read_text())['verdict'] == 'honoured'
    assert not (dir_off/'seed_probe.json').exists()

def test_the_benchmark_grid_sets_pair_seeds_and_coupled_worlds_for_every_rule():
    "A grid's settings reach every rule's run config (and leave it as before when off); world families take the noise."
    from treetrm.bench.loop_bench import BenchSettings, realistic_world, bench_run_config
    assert bench_run_config(BenchSettings(pair_seeds=True), 100)['pair_seeds'] is True
    assert 'pair_seeds' not in bench_run_config(BenchSettings(), 100)  # the configs of every earlier grid, unchanged
    w = realistic_world('rich', 0.3, 300, coupling=0.64)
    assert w['realism'] == dict(effects='rich', flip_rate=0.3, coupling=0.64) and w['n_videos'] == 250
    assert realistic_world('rich', 0.3, 300)['realism'] == dict(effects='rich', flip_rate=0.3)
