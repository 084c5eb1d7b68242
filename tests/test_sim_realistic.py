"""The realistic world family: per-run answer noise, the effect mixture, exact truth, and the one-call agent."""
import asyncio, collections, json, math
from pathlib import Path
import pytest
from treetrm.core import project_root
from treetrm.agent.inference import run_inference
from treetrm.log import HarnessLog
from treetrm.sim.realism import EFFECT_MIXTURES, component_counts, rule_kind
from treetrm.sim.world import make_world, true_accuracy, world_questions, question_probability, check_world, load_world
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.roles import SimEvolver

SEED_SKILLS = project_root()/'prompts'/'skills'

@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('real')/'world', seed=5, n_videos=80, profile='realistic')

def _run(world, log, run_id, skills, one_call=True, questions=None):
    qs = questions or list(world_questions(world).values())
    asyncio.run(run_inference(qs, trees_dir=world/'trees', provider=SimAgent(world, 0, one_call=one_call), log=log,
                              run_id=run_id, skills_dir=skills, concurrency=8, progress=False))
    p = log.predictions(run_id)
    return dict(zip(p['question_id'].to_list(), p['correct'].to_list())), p

def test_world_checks_and_mixture(world):
    assert len(check_world(world)) == 0  # every planted number recomputes from the evidence and the settings
    w = load_world(world)
    comps = EFFECT_MIXTURES['balanced']
    for t, v in w['task_types'].items():
        assert len(v['rules']) >= 20
        want = component_counts([c[0] for c in comps], len(v['rules']))
        got = collections.Counter(next(i for i, (_, lo, hi) in enumerate(comps) if lo <= r['target_effect'] <= hi)
                                  for r in v['rules'])
        assert [got[i] for i in range(len(comps))] == want, t
        off = [r for r in v['rules'] if abs(r['effect'] - r['target_effect']) > 0.05]
        assert len(off) <= 2, (t, off)  # an out-of-reach target keeps its exact effect; rare
        assert all(r['kind'] == rule_kind(r['effect']) for r in v['rules'])
        # about half harmful, a third within ±0.5 (kinds follow the exact effects)
        kinds = collections.Counter(r['kind'] for r in v['rules'])
        assert abs(kinds['trap'] / len(v['rules']) - 0.5) < 0.1 and abs(kinds['neutral'] / len(v['rules']) - 0.33) < 0.1

def test_flip_rate_and_exact_replay(world, tmp_path):
    log = HarnessLog(tmp_path/'h.db')
    a, pa = _run(world, log, 'runA', SEED_SKILLS)
    b, _ = _run(world, log, 'runB', SEED_SKILLS)
    n = len(a)
    flips = sum(a[q] != b[q] for q in a) / n
    target = load_world(world)['realism']['flip_rate']
    assert abs(flips - target) < 3 * math.sqrt(target * (1 - target) / n), (flips, target, n)
    assert 0.15 <= flips <= 0.30
    log2 = HarnessLog(tmp_path/'h2.db')
    _, pa2 = _run(world, log2, 'runA', SEED_SKILLS)  # the same run id, another database: the same bytes
    cols = ['question_id', 'prediction', 'correct', 'stop_reason', 'steps_used', 'steps_json']
    assert pa.select(cols).sort('question_id').equals(pa2.select(cols).sort('question_id'))

def _with_rules(world, tmp_path, picks):
    "A skills folder: the seed skills plus the given rules in their types' Strategy sections."
    d = tmp_path/'skills'
    d.mkdir(exist_ok=True)
    files = {p.name: p.read_text() for p in SEED_SKILLS.glob('*.md')}
    for t, rule in picks:
        name = next(n for n, s in files.items() if f'task_type: {t}\n' in s)
        files[name] = files[name].replace('## Strategy\n', f'## Strategy\n- {rule["text"]}\n', 1)
    for n, s in files.items(): (d/n).write_text(s)
    return d

@pytest.mark.slow
def test_true_accuracy_matches_many_runs(world, tmp_path):
    w = load_world(world)
    picks = [(t, r) for t, v in sorted(w['task_types'].items())
             for r in sorted(v['rules'], key=lambda r: -r['effect'])[:2] + [v['rules'][0]]]
    skills = _with_rules(world, tmp_path, picks)
    qs = list(world_questions(world).values())
    log, k = HarnessLog(tmp_path/'h.db'), 12
    runs = [_run(world, log, f'many{i}', skills)[0] for i in range(k)]
    mean = sum(sum(r.values()) for r in runs) / (k * len(qs))
    truth = true_accuracy(world, skills, qs)
    texts = {p.name: p.read_text() for p in skills.glob('*.md')}
    var = sum(p * (1 - p) for p in (
        question_probability(w, q.question_id, texts['_default.md'] + '\n'
                             + next(s for s in texts.values() if f'task_type: {q.task_type}\n' in s))
        for q in qs))
    se = math.sqrt(var) / (len(qs) * math.sqrt(k))
    assert abs(mean - truth) < 3 * se, (mean, truth, se)
    assert truth - true_accuracy(world, SEED_SKILLS, qs) > 0.01  # the two best rules of each type move the truth

@pytest.mark.slow
def test_one_call_agent_agrees_with_tool_agent(world, tmp_path):
    w = load_world(world)
    qs = list(world_questions(world).values())[:240]
    picks = [(t, r) for t, v in sorted(w['task_types'].items()) for r in v['rules'][:3]]
    skills = _with_rules(world, tmp_path, picks)
    log = HarnessLog(tmp_path/'h.db')
    for rid in ('agree0', 'agree1'):
        one, _ = _run(world, log, rid + '_one', skills, one_call=True, questions=qs)
        tools, p = _run(world, log, rid + '_tools', skills, one_call=False, questions=qs)
        assert p['stop_reason'].unique().to_list() == ['finished'] and p['steps_used'].min() >= 2
    # each mode under the same run id: identical answers (one draw), so the rules' estimated effects agree exactly
    a, _ = _run(world, log, 'same', skills, one_call=True, questions=qs)
    log2 = HarnessLog(tmp_path/'h2.db')
    b, _ = _run(world, log2, 'same', skills, one_call=False, questions=qs)
    assert a == b

def test_evolver_leans_towards_relevant_rules(world):
    w = load_world(world)
    t = 'Counting Problem'
    fails = [q for q, e in w['evidence'].items() if e['task_type'] == t and e['class'] == 'open_all_l3'][:8]
    def proposals(beta):
        ev, out = SimEvolver(world, 0, informativeness=beta), []
        for s in range(150):
            ctx = {'kind': 'evolve', 'task_type': t, 'target': 'counting-problem.md', 'skill_text': '', 'blacklist': [],
                   'failures': [{'question_id': q} for q in fails], 'successes': []}
            msgs = [{'role': 'user', 'content': 'Propose.\n```json\n' + json.dumps(ctx) + '\n```'}]
            r = json.loads(asyncio.run(ev.chat(msgs, seed=s)).content)
            out.append(r['ops'][0]['text'][2:])
        return out
    from treetrm.sim.roles import rule_relevance
    rules = {r['text']: r for r in w['task_types'][t]['rules']}
    rel = lambda texts: sum(rule_relevance(w, rules[x], fails) for x in texts) / len(texts)
    assert rel(proposals(4.0)) > 1.3 * rel(proposals(0.0))
