("The simulated agent through the real agent loop: planted reachability per rule, determinism, skill modes, "
 "the forced answer, latency and layering.")
import ast, asyncio, json, time
from pathlib import Path
import pytest
from treetrm.agent.navigate import build_messages, run_agent
from treetrm.core import DataError, project_root
from treetrm.trees import load_tree
from treetrm.sim.generator import reachable
from treetrm.sim.world import ensure_demo_world, load_world, world_questions
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.roles import make_role
from treetrm.agent.skills import load_skill_dir, parse_skill, render_skill, skill_file

ROOT = project_root()
DEMO = ensure_demo_world()
WORLD = load_world()
QUESTIONS = {q.question_id: q for q in world_questions().values()}
SEED = load_skill_dir(ROOT/'prompts'/'skills')

def with_rules(skills, task_type, texts):
    "Skills with rule bullets prepended to the Strategy section of `task_type`'s skill."
    name = skill_file(task_type)
    text = render_skill(skills[name]).replace('## Strategy\n', '## Strategy\n' + ''.join(f'- {t}\n' for t in texts), 1)
    return {**skills, name: parse_skill(text, name)}

def run(qid, skills=SEED, agent=None, **kw):
    q = QUESTIONS[qid]
    return asyncio.run(run_agent(q, load_tree(DEMO/'trees'/q.video_id), agent or SimAgent(), skills=skills, **kw))

def by_type(n):
    out = {}
    for qid, ev in WORLD['evidence'].items(): out.setdefault(ev['task_type'], []).append(qid)
    return {t: qids[:n] for t, qids in out.items()}

@pytest.mark.slow
def test_each_rule_alone_reaches_exactly_the_planted_evidence():
    "With the seed skill plus any one rule, the agent is ready exactly when `reachable` says so, and then right."
    bad, n = [], 0
    for tt, qids in by_type(30).items():
        for rule in [None] + WORLD['task_types'][tt]['rules']:
            skills = SEED if rule is None else with_rules(SEED, tt, [rule['text']])
            b = [] if rule is None else [rule['behaviour']]
            for qid in qids:
                r = run(qid, skills, seed=3)
                n += 1
                ready = r.steps[-1].reflect['answer_ready']
                assert r.stop_reason == 'finished', (qid, r.stop_reason)
                if ready != reachable(WORLD['evidence'][qid], b) or (ready and r.prediction != QUESTIONS[qid].answer):
                    bad.append((qid, b))
    assert n > 1000 and bad == []

def test_tool_use_is_real():
    ("The agent opens the source nodes through tool calls when it reaches them, "
     "and never names a node it has not been shown.")
    for qid in by_type(5)['Object Recognition'] + by_type(5)['Counting Problem']:
        tt = QUESTIONS[qid].task_type
        r = run(qid,
                with_rules(SEED, tt, [x['text'] for x in WORLD['task_types'][tt]['rules'] if x['kind'] == 'helpful']))
        shown = ' '.join(s.output for s in r.steps)
        assert all(n in shown for n in WORLD['evidence'][qid]['source_nodes'])
        named = [a for s in r.steps if s.tool in ('view_node', 'observe_frame') for a in [next(iter(s.args.values()))]]
        context = [build_messages(QUESTIONS[qid], load_tree(DEMO/'trees'/QUESTIONS[qid].video_id), SEED)[1]['content']]
        for s, node in zip([s for s in r.steps if s.tool in ('view_node', 'observe_frame')], named):
            assert any(node in c for c in context), node  # every node it opens was named in an earlier message
            context.append(s.output)
        assert not any(s.output.startswith('[tool error]', s.output.index('\n') + 1) for s in r.steps)

def test_deterministic_per_request_and_seed():
    q = QUESTIONS['sim0v000-1']
    msgs = build_messages(q, load_tree(DEMO/'trees'/q.video_id), SEED)
    a = asyncio.run(SimAgent().chat(msgs, seed=1)).content
    assert a == asyncio.run(SimAgent().chat(msgs, seed=1)).content
    assert json.loads(a)['action'] == {'tool': 'view_node', 'args': {'node_id': 'sim0v000_L1_000'}}
    guesses = {run(qid, seed=s).prediction for s in range(12) for qid in ['sim0v000-1']
               if not reachable(WORLD['evidence'][qid], [])}
    assert len(guesses) > 1  # an unreached question is a guess that the seed changes
    assert run('sim0v000-1', seed=5).steps == run('sim0v000-1', seed=5).steps

def test_forced_answer_turn_submits():
    "When the budget runs out the loop asks once for an answer, and the agent gives one from what it saw."
    r = run('sim0v000-3', max_steps=2)
    assert r.stop_reason == 'budget_exceeded' and r.prediction in 'ABCD' and r.steps[-1].tool == 'submit_answer'
    assert r.steps_used == 2

def test_skill_modes():
    ("Manual mode: the agent reads its type's strategy first and follows the rules it finds there; "
     "mode none is the rule-free agent.")
    tt = 'Temporal Reasoning'
    qids = [q for q in by_type(100)[tt]
            if WORLD['evidence'][q]['requires'] == [['compare_timestamps', 'scan_all_scenes']]][:5]
    helpful = with_rules(SEED, tt, [x['text'] for x in WORLD['task_types'][tt]['rules']
                                    if x['behaviour'] == 'compare_timestamps'])
    for qid in qids:
        r = run(qid, helpful, mode='manual')
        assert (r.steps[0].tool, r.steps[0].args) == ('read_skill', {'name': 'temporal-reasoning'})
        assert r.steps[-1].reflect['answer_ready'] and r.prediction == QUESTIONS[qid].answer
        assert not run(qid, helpful, mode='none').steps[-1].reflect['answer_ready']
        assert not run(qid, SEED, mode='manual').steps[-1].reflect['answer_ready']

def test_usage_latency_and_registration():
    q = QUESTIONS['sim0v000-5']
    msgs = build_messages(q, load_tree(DEMO/'trees'/q.video_id), SEED)
    t0 = time.perf_counter()
    r = asyncio.run(SimAgent(latency_s=0.1).chat(msgs))
    assert time.perf_counter() - t0 >= 0.1 and r.latency_s == 0.1 and r.model == 'sim-agent'
    assert r.usage['prompt_tokens'] > sum(len(m['content']) for m in msgs) / 5 and r.usage['completion_tokens'] > 10
    res = run('sim0v000-5')
    assert res.usage['prompt_tokens'] > 1000 * res.n_calls / 2  # the system prompt alone is well over 500 tokens a call
    assert isinstance(make_role('sim-agent'), SimAgent)

def test_unknown_question_is_a_clear_error():
    msgs = [{'role': 'system', 'content': 's'},
            {'role': 'user', 'content': 'Question: Who are you?\nA. x\nB. y\nVideo: nope\nStart from these scenes: a'}]
    with pytest.raises(DataError, match="not one of this world's questions"): asyncio.run(SimAgent().chat(msgs))

def test_sim_modules_import_only_lower_layers():
    "The simulator's modules import the layers below them and each other, never the harness above (agent, log, ...)."
    allowed = ('core', 'data', 'trees', 'llm.', 'sim.')
    for path in sorted((ROOT/'treetrm'/'sim').glob('*.py')):
        if path.stem in ('__init__', 'sim_vision'): continue  # the builder's model: it serves build.video
        here = ['treetrm', 'sim', path.stem]
        mods = {'.'.join(here[:-n.level] + [n.module]).removeprefix('treetrm.') if n.level
                else n.module.removeprefix('treetrm.') for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.ImportFrom) and n.module and (n.level or n.module.startswith('treetrm.'))}
        bad = {m for m in mods if not any(m == a or a.endswith('.') and m.startswith(a) for a in allowed)}
        assert mods and not bad, (path.stem, bad)