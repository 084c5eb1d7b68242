("Split stage: byte-reproducible pools on the demo world, seeds, clear failures with no pools written, "
 "and property tests of the six checks.")
import asyncio, json, random
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from treetrm.llm.backends import make_providers
from hypothesis import HealthCheck, given, settings, strategies as st

from treetrm.core import ConfigError, DataError, TreeTrmError, project_root, read_json, sha256_file
from treetrm.data import Question, load_questions
from treetrm.log import HarnessLog
from treetrm.split.by_video import POOLS, build_split, check_split, load_split_config
from treetrm.split.stage import has_pools, load_split, pools_bytes, run_split

ROOT = project_root()
DEMO = ROOT/'data'/'demo'
SKILLS = ROOT/'prompts'/'skills'
CONFIG = dict(seed=0, test_ratio=0.3, epsilon=0.1, report_floor=20, floor_k={'Counting Problem': 5, 'OCR Problems': 5},
              val_ratio=0.4, val_wrong_min=10)


def stage(world, **kw):
    return dict(questions_path=world/'questions.jsonl', trees_dir=world/'trees', skills_dir=SKILLS,
                **make_providers('sim', world), progress=False, **kw)


@pytest.fixture(scope='module')
def demo_run(tmp_path_factory):
    "One baseline + diagnosis + split of the demo world, shared by the tests below."
    ws = tmp_path_factory.mktemp('ws1')
    split = asyncio.run(run_split(ws, config=CONFIG, **stage(DEMO)))
    return ws, split


def test_demo_split_is_byte_reproducible(demo_run, tmp_path):
    ws, split = demo_run
    log = HarnessLog(ws/'harness.db')  # same baseline and signals: everything resumes, nothing is re-run
    again = asyncio.run(run_split(tmp_path/'ws2', config=CONFIG, log=log, generated_at='2001-01-01T00:00:00+00:00',
                                  **stage(DEMO)))
    assert (ws/'pools'/'pools.json').read_bytes() == (tmp_path/'ws2'/'pools'/'pools.json').read_bytes()
    assert again == split
    manifest = read_json(ws/'pools'/'split_manifest.json')
    assert manifest['pools_sha256'] == sha256_file(ws/'pools'/'pools.json')
    assert read_json(tmp_path/'ws2'/'pools'/'split_manifest.json')['generated_at'] == '2001-01-01T00:00:00+00:00'
    # the baseline covered the whole benchmark, and every question landed in exactly one pool
    qs = load_questions(DEMO/'questions.jsonl')
    assert sorted(q for p in POOLS for q in split.questions(p)) == sorted(q.question_id for q in qs)


def test_small_world_from_scratch_is_reproducible(tmp_path):
    from treetrm.sim.world import make_world
    world = make_world(tmp_path/'world', seed=5, n_videos=10)
    cfg = {**CONFIG, 'report_floor': 10, 'epsilon': 0.2, 'floor_k': {'Counting Problem': 2}, 'val_wrong_min': 3}
    a = asyncio.run(run_split(tmp_path/'a', config=cfg, **stage(world)))
    b = asyncio.run(run_split(tmp_path/'b', config=cfg, **stage(world)))
    assert (tmp_path/'a'/'pools'/'pools.json').read_bytes() == (tmp_path/'b'/'pools'/'pools.json').read_bytes()
    assert load_split(tmp_path/'a'/'pools') == a == b


def signals_of(ws, split):
    log = HarnessLog(ws/'harness.db')
    return log.frame('diagnosis_signals', split.baseline_run_id,
                     diag_fingerprint=split.diag_fingerprint), log.predictions(split.baseline_run_id)


def test_other_seed_gives_another_valid_split(demo_run):
    ws, split = demo_run
    sig, preds = signals_of(ws, split)
    qs = load_questions(DEMO/'questions.jsonl')
    other = build_split(qs, sig, config={**CONFIG, 'seed': 1}, predictions=preds)
    assert pools_bytes(other) != pools_bytes(split)
    assert {p: other.videos(p) for p in POOLS} != {p: split.videos(p) for p in POOLS}
    check_split(other, qs)
    t2 = Counter(a.task_type for a in other.assignments if a.pool != 'test' and a.signal == 'T2')
    assert all(t2[t] >= k for t, k in CONFIG['floor_k'].items())


@pytest.mark.parametrize('change, knob', [
    ({'floor_k': {'Counting Problem': 10_000}}, "floor_k['Counting Problem']"),
    ({'floor_k': {'Spatial Reasoning': 1}}, "floor_k['Spatial Reasoning']"),
    ({'val_wrong_min': 10_000}, 'raise val_ratio'),
])
def test_impossible_settings_say_what_to_change_and_write_no_pools(demo_run, tmp_path, change, knob):
    ws, _ = demo_run
    with pytest.raises(ConfigError) as e:
        asyncio.run(run_split(tmp_path/'ws', config={**CONFIG, **change}, log=HarnessLog(ws/'harness.db'),
                              **stage(DEMO)))
    assert knob in str(e.value)
    assert not (tmp_path/'ws'/'pools').exists() and not has_pools(tmp_path/'ws')


def test_config_keys_are_all_required_and_known(tmp_path):
    for k in CONFIG:
        with pytest.raises(ConfigError, match=f"missing key '{k}'"):
            load_split_config({x: v for x, v in CONFIG.items() if x != k})
    with pytest.raises(ConfigError, match="unknown key 'epsilon_test'"):
        load_split_config({**CONFIG, 'epsilon_test': 0.1})
    (tmp_path/'c.yaml').write_text('seed: 1\ntest_ratio: 0.3\n')
    with pytest.raises(ConfigError, match='c.yaml'): load_split_config(tmp_path/'c.yaml')


def test_dry_run_calls_no_model_and_writes_nothing(tmp_path):
    class NoCalls:
        model = 'no-calls'
        async def chat(self, *a, **k): raise AssertionError('dry_run called a model')
    plan = asyncio.run(run_split(tmp_path/'ws', config=CONFIG, dry_run=True,
                                 **{**stage(DEMO), 'agent': NoCalls(), 'judge': NoCalls()}))
    assert plan.n_videos == 50 and 'no-calls' in plan.diag_fingerprint and not (tmp_path/'ws').exists()


# ---- properties of build_split on random small benchmarks ----

TYPES = ('Counting Problem', 'OCR Problems', 'Temporal Reasoning', 'Action Recognition')
LEVELS = ('easy', 'medium', 'hard')


@st.composite
def benchmarks(draw):
    "Random videos with 1-4 questions each, random task types, difficulties and signals."
    n_videos = draw(st.integers(3, 25))
    qs, sig = [], []
    for v in range(n_videos):
        for j in range(draw(st.integers(1, 4))):
            q = Question(f'v{v}q{j}', f'v{v}', draw(st.sampled_from(TYPES)), 'Q?', ('A. a', 'B. b'), 'A',
                         difficulty=draw(st.sampled_from(LEVELS + (None,))))
            qs.append(q)
            tier = draw(st.sampled_from((None, None, 'T0', 'T1', 'T2', 'T2')))
            if tier:
                sig.append(dict(run_id='b', question_id=q.question_id, diag_fingerprint='fp', tier=tier,
                                infra=tier == 'T0', degraded=False))
    cfg = dict(seed=draw(st.integers(0, 3)), test_ratio=draw(st.sampled_from((0.2, 0.3, 0.5))),
               epsilon=draw(st.sampled_from((0.1, 0.2, 0.4))), report_floor=draw(st.integers(1, 8)),
               floor_k={t: draw(st.integers(0, 3)) for t in draw(st.sets(st.sampled_from(TYPES), max_size=2))},
               val_ratio=draw(st.sampled_from((0.3, 0.5))), val_wrong_min=draw(st.integers(0, 3)))
    return qs, sig, cfg


def shares(qs, key):
    c = Counter(key(q) for q in qs)
    return {k: n / len(qs) for k, n in c.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(benchmarks())
def test_build_split_keeps_its_six_promises(case):
    qs, sig, cfg = case
    try: split = build_split(qs, sig, config=cfg)
    except (ConfigError, DataError) as e:
        assert (str(e)
                and any(w in str(e) for w in ('floor_k', 'epsilon', 'val_wrong_min', 'test_ratio', 'empty', 'videos')))
        return
    by_id = {q.question_id: q for q in qs}
    pool_of = {a.question_id: a.pool for a in split.assignments}
    # 1. disjoint by question  2. disjoint by video  3. union inside (here: equal to) the benchmark
    assert len(pool_of) == len(split.assignments) == len(qs) and set(pool_of) == set(by_id)
    video_pools = {}
    for q, p in pool_of.items(): video_pools.setdefault(by_id[q].video_id, set()).add(p)
    assert all(len(ps) == 1 for ps in video_pools.values())
    assert all(split.questions(p) for p in POOLS)
    # 4. epsilon on the test pool for task types and difficulty levels with >= report_floor questions
    test = [by_id[q] for q, p in pool_of.items() if p == 'test']
    for key in (lambda q: q.task_type, lambda q: q.difficulty):
        big = {k for k, n in Counter(key(q) for q in qs).items() if k is not None and n >= cfg['report_floor']}
        g, t = shares(qs, key), shares(test, key)
        assert all(abs(t.get(k, 0) - g[k]) <= cfg['epsilon'] + 1e-9 for k in big)
    # 5. floors hold in trainval
    tiers = {s['question_id']: s['tier'] for s in sig}
    t2 = Counter(by_id[q].task_type for q, p in pool_of.items() if p != 'test' and tiers.get(q) == 'T2')
    assert all(t2[t] >= k for t, k in cfg['floor_k'].items())
    # power guard
    assert sum(p == 'validation' and tiers.get(q) in ('T1', 'T2') for q, p in pool_of.items()) >= cfg['val_wrong_min']
    # 6. deterministic, whatever the order the inputs come in
    shuffled_q, shuffled_s = qs[:], sig[:]
    random.Random(1).shuffle(shuffled_q)
    random.Random(2).shuffle(shuffled_s)
    assert pools_bytes(build_split(shuffled_q, shuffled_s, config=cfg)) == pools_bytes(split)


def test_frozen_pools_are_never_replaced(demo_run):
    ws, split = demo_run
    class NoCalls:
        model = 'no-calls'
        async def chat(self, *a, **k): raise AssertionError('frozen pools must come back without model calls')
    before = (ws/'pools'/'pools.json').read_bytes()
    assert asyncio.run(run_split(ws, config=CONFIG, **{**stage(DEMO), 'agent': NoCalls(), 'judge': NoCalls()})) == split
    with pytest.raises(ConfigError, match='already holds frozen pools'):
        asyncio.run(run_split(ws, config={**CONFIG, 'seed': 3}, **stage(DEMO)))
    assert (ws/'pools'/'pools.json').read_bytes() == before
