"The planted-truth world: determinism, the independent checker, the demo world, and the judge and evolver statistics."
import asyncio, json, random
from pathlib import Path
import pytest
from treetrm.core import DataError, read_json
from treetrm.data import load_questions, option_text
from treetrm.trees import load_trees
from treetrm.sim.evidence import derive_answer
from treetrm.sim.generator import reachable, TYPE_RULES
from treetrm.sim.world import (check_world, ensure_demo_world, load_world, make_world, world_fingerprint, DEMO_SEED,
                         DEMO_VIDEOS)
from treetrm.sim.roles import SimEvolver, SimJudge

def files(d):
    d = Path(d)
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob('*')) if p.is_file()}

@pytest.fixture(scope='module')
def small(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('w'), seed=7, n_videos=8)

def test_same_seed_same_bytes_other_seed_differs(small, tmp_path):
    again = make_world(tmp_path/'again', seed=7, n_videos=8)
    assert files(small) == files(again)
    other = make_world(tmp_path/'other', seed=8, n_videos=8)
    assert (Path(other)/'questions.jsonl').read_bytes() != (Path(small)/'questions.jsonl').read_bytes()

def test_check_world_passes_and_trees_load(small):
    assert len(check_world(small)) == 0
    qs = load_questions(Path(small)/'questions.jsonl')
    trees = load_trees(Path(small)/'trees')
    assert {q.video_id for q in qs} == set(trees) and len(trees) == 8
    assert all(n in trees[q.video_id].nodes for q in qs for n in q.source_nodes)

def test_answers_need_their_source_nodes(small):
    "Removing a source node's evidence text makes the answer underivable: the answer lives only there."
    qs, trees = load_questions(Path(small)/'questions.jsonl'), load_trees(Path(small)/'trees')
    world = read_json(Path(small)/'world.json')
    for q in qs:
        if q.task_type != 'OCR Problems': continue
        tree, ev = trees[q.video_id], world['evidence'][q.question_id]
        opts = [option_text(o) for o in q.options]
        node = tree.node(q.source_nodes[0])
        node.card['visible_text'] = ''  # the card dict is mutable in memory; blank the on-screen text
        assert derive_answer(tree, q.task_type, ev['key'], list(q.source_nodes), opts) is None

def test_check_world_catches_a_tampered_tree(small, tmp_path):
    import shutil
    d = Path(shutil.copytree(small, tmp_path/'t'))
    tree_file = sorted((d/'trees').glob('*/tree.json'))[0]
    tree = json.loads(tree_file.read_text())
    for n in tree['nodes'].values():
        if n['level'] == 3: n['card']['visible_text'] = ''
    tree_file.write_text(json.dumps(tree))
    problems = check_world(d, strict=False)
    assert len(problems) > 1 and any('fingerprint' in p for p in problems['problem'].to_list())
    with pytest.raises(DataError): check_world(d)

def test_rule_effects_have_the_planted_sign(small):
    world = read_json(Path(small)/'world.json')
    for tt, info in world['task_types'].items():
        kinds = {r['kind'] for r in info['rules']}
        assert {'helpful', 'trap', 'neutral'} <= kinds
        for r in info['rules']:
            if r['kind'] == 'neutral': assert r['effect'] == 0
        # each helpful rule of the type unlocks something in a world this size, each trap hides something
        assert sum(r['effect'] for r in info['rules'] if r['kind'] == 'helpful') > 0
        assert sum(r['effect'] for r in info['rules'] if r['kind'] == 'trap') < 0

def test_demo_world_is_committed_regenerable_and_large_enough(tmp_path):
    demo = ensure_demo_world()
    assert len(check_world(demo)) == 0
    fresh = make_world(tmp_path/'demo', seed=DEMO_SEED, n_videos=DEMO_VIDEOS)
    assert (world_fingerprint(fresh)
            == world_fingerprint(demo)), 'data/demo is stale: delete it and run ensure_demo_world()'
    qs = load_questions(Path(demo)/'questions.jsonl')
    per_type = {t: sum(q.task_type == t for q in qs) for t in {q.task_type for q in qs}}
    assert len(per_type) >= 6 and sorted(per_type.values())[-6] >= 100
    assert sum(p.stat().st_size for p in Path(demo).rglob('*') if p.is_file()) < 5_000_000
    world = load_world(demo)
    for tt, info in world['task_types'].items():
        helpful = [r['effect'] for r in info['rules'] if r['kind'] == 'helpful']
        traps = [r['effect'] for r in info['rules'] if r['kind'] == 'trap']
        assert (2 <= len(helpful) <= 4 and 1 <= len(traps) <= 2 and all(e >= 10 for e in helpful)
                and all(e <= -10 for e in traps)), (tt, helpful, traps)

def test_ensure_demo_world_rejects_a_modified_copy(tmp_path):
    d = make_world(tmp_path/'d', seed=DEMO_SEED, n_videos=2)
    (Path(d)/'questions.jsonl').write_text((Path(d)/'questions.jsonl').read_text().replace('"A"', '"B"', 1))
    with pytest.raises(DataError, match='fingerprint'): ensure_demo_world(d)

# judge and evolver

def diagnose_messages(world, qid, skill_text=''):
    ev = world['evidence'][qid]
    ctx = {'kind': 'diagnose', 'question_id': qid, 'video_id': ev['video_id'], 'task_type': ev['task_type'],
           'question': '?', 'options': [], 'answer': 'A', 'prediction': 'B', 'skill_file': 'skill.md', 'steps': []}
    return [{'role': 'user', 'content': f'{skill_text}\n```json\n{json.dumps(ctx)}\n```'}]

def evolve_messages(task_type, skill_text='', blacklist=()):
    ctx = {'kind': 'evolve', 'task_type': task_type, 'target': 't.md', 'skill_text': skill_text, 'failures': [],
           'successes': [], 'blacklist': list(blacklist)}
    return [{'role': 'user', 'content': f'```json\n{json.dumps(ctx)}\n```'}]

def reply(provider, messages, seed=None): return json.loads(asyncio.run(provider.chat(messages, seed=seed)).content)

def test_judge_tier_follows_the_truth(small):
    world, judge = read_json(Path(small)/'world.json'), SimJudge(small, noise=0.0)
    for qid, ev in sorted(world['evidence'].items())[:60]:
        rules = {r['behaviour']: r['text'] for r in world['task_types'][ev['task_type']]['rules']}
        bare = reply(judge, diagnose_messages(world, qid))
        assert bare['tier'] == ('T1' if reachable(ev, []) else 'T2')
        if ev['requires']:  # the skill with one behaviour of every clause: no longer a skill defect
            skill = '\n'.join(f'- {rules[c[0]]}' for c in ev['requires'])
            assert reply(judge, diagnose_messages(world, qid, skill))['tier'] == 'T1'
            assert bare['evolution_target'] == 'skill.md' and bare['missed_nodes'] == ev['source_nodes']

def test_judge_noise_rate_and_determinism(small):
    world, judge = read_json(Path(small)/'world.json'), SimJudge(small, noise=0.25)
    qid = next(q for q, e in sorted(world['evidence'].items()) if not reachable(e, []))
    msgs = diagnose_messages(world, qid)
    tiers = [reply(judge, msgs, seed=s)['tier'] for s in range(800)]
    assert abs(tiers.count('T1') / 800 - 0.25) < 0.05  # binomial sd ≈ 0.015
    assert reply(judge, msgs, seed=11) == reply(judge, msgs, seed=11)
    assert len({json.dumps(reply(judge, msgs, seed=s)) for s in range(20)}) > 1

def test_evolver_kind_probabilities(small):
    world = read_json(Path(small)/'world.json')
    evo = SimEvolver(small, p_helpful=0.6, p_neutral=0.1, p_trap=0.3)
    kinds = {r['text']: r['kind'] for r in world['task_types']['OCR Problems']['rules']}
    drawn = [kinds[reply(evo, evolve_messages('OCR Problems'), seed=s)['ops'][0]['text'][2:]] for s in range(1000)]
    for kind, p in (('helpful', 0.6), ('neutral', 0.1), ('trap', 0.3)):
        assert abs(drawn.count(kind) / 1000 - p) < 0.05, kind

def test_evolver_never_repeats_present_or_blacklisted_rules(small):
    world, evo = read_json(Path(small)/'world.json'), SimEvolver(small)
    rng = random.Random(0)
    for tt in TYPE_RULES:
        texts = [r['text'] for r in world['task_types'][tt]['rules']]
        for s in range(30):
            present, black = rng.sample(texts, 2), [f'- {t}' for t in rng.sample(texts, 2)]
            e = reply(evo, evolve_messages(tt, '\n'.join(f'- {t}' for t in present), black), seed=s)
            if e['ops']: assert e['ops'][0]['text'][2:] not in present + [b[2:] for b in black]
        e = reply(evo, evolve_messages(tt, '\n'.join(texts[:2]), texts[2:]))
        assert e == {'target': 't.md', 'ops': [], 'rationale': 'no change'}

def test_evolver_same_request_same_reply(small):
    evo, msgs = SimEvolver(small), evolve_messages('Counting Problem')
    assert reply(evo, msgs, seed=4) == reply(evo, msgs, seed=4)
    assert len({json.dumps(reply(evo, msgs, seed=s)) for s in range(30)}) > 1

def test_judge_rejects_unknown_questions_and_missing_context(small):
    judge = SimJudge(small)
    with pytest.raises(DataError, match='not in this world'):
        asyncio.run(judge.chat([{'role': 'user',
                                 'content': '```json\n{"kind": "diagnose", "question_id": "nope"}\n```'}]))
    with pytest.raises(DataError, match='no ```json'):
        asyncio.run(judge.chat([{'role': 'user', 'content': 'hello'}]))
