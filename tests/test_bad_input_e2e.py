"""Bad input end to end: malformed questions, trees, configs, notebook parameters and model outputs go through the
entry points (run_split, run_inference, diagnose, propose_edit, Runner, the stage notebooks); each is a clear error or
a recorded rejection, and the workspace is unchanged."""
import asyncio, json, shutil
from pathlib import Path

import papermill as pm
import polars as pl
import pytest

from treetrm.core import ConfigError, DataError, project_root, sha256_file
from treetrm.data import load_questions, save_questions
from treetrm.proposers.diagnose import diagnose
from treetrm.proposers.evolve import propose_edit
from treetrm.agent.inference import run_inference
from treetrm.llm.protocol import LLMResponse
from treetrm.llm.config import load_role_config
from treetrm.log import HarnessLog
from treetrm.train.runner import DEFAULT_SPLIT, Runner
from treetrm.sim.world import make_world
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.roles import make_role
from treetrm.agent.edits import REJECT_REASONS
from treetrm.llm.backends import make_providers
from treetrm.split.stage import run_split

ROOT = project_root()
CORPUS = ROOT/'tests'/'bad_inputs'
SKILLS = ROOT/'prompts'/'skills'

def snapshot(folder:Path) -> dict:
    "Every file under `folder` with its hash (empty when the folder does not exist)."
    return ({str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob('*')) if p.is_file()}
            if folder.exists() else {})

@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('bad')/'world', seed=4, n_videos=3)

@pytest.fixture
def workspace(tmp_path):
    "A workspace that already holds something (a note), so 'unchanged' is checked on real content."
    ws = tmp_path/'ws'
    ws.mkdir()
    (ws/'note.txt').write_text('keep me')
    return ws

def split_call(ws, world, **kw):
    p = make_providers('sim', world_dir=world)
    args = dict(questions_path=world/'questions.jsonl', trees_dir=world/'trees', skills_dir=SKILLS, agent=p['agent'],
                judge=p['judge'], config=DEFAULT_SPLIT, concurrency=4, progress=False) | kw
    return asyncio.run(run_split(ws, **args))

def expect(kind:str) -> dict: return json.loads((CORPUS/kind/'expect.json').read_text())

# ---------------------------------------------------------------- questions and trees through the split stage

@pytest.mark.parametrize('name', sorted(expect('questions')))
def test_malformed_questions_stop_the_split(name, world, workspace):
    before = snapshot(workspace)
    with pytest.raises(DataError) as e: split_call(workspace, world, questions_path=CORPUS/'questions'/name)
    for s in expect('questions')[name]: assert s in str(e.value), (s, str(e.value))
    assert snapshot(workspace) == before

TREE_CASES = sorted(n for n in expect('trees') if n.endswith('.json'))

@pytest.mark.parametrize('name', TREE_CASES)
def test_malformed_tree_stops_split_and_inference(name, world, workspace, tmp_path):
    # a copy of the world whose first video's tree is the broken one
    data = tmp_path/'data'
    shutil.copytree(world, data)
    qs = load_questions(world/'questions.jsonl')
    target = data/'trees'/qs[0].video_id/'tree.json'
    target.write_bytes((CORPUS/'trees'/name).read_bytes())
    subs = [s for s in expect('trees')[name] if name not in s]  # the corpus names its own file; here it is tree.json
    before = snapshot(workspace)
    with pytest.raises(DataError) as e: split_call(workspace, data, trees_dir=data/'trees')
    assert str(target) in str(e.value) and all(s in str(e.value) for s in subs), str(e.value)
    log = HarnessLog(workspace/'harness.db')
    with pytest.raises(DataError, match='tree.json'):
        asyncio.run(run_inference(qs, trees_dir=data/'trees', provider=SimAgent(data), log=log, run_id='r',
                                  skills_dir=SKILLS, progress=False))
    assert log.runs().height == 0 and log.frame('predictions').height == 0  # failed before any model call or record
    log.close()

# ---------------------------------------------------------------- configs

SPLIT_CONFIGS = {'unknown key': ({**DEFAULT_SPLIT, 'n_test': 3}, "unknown key 'n_test'"),
                 'missing key': ({k: v for k, v in DEFAULT_SPLIT.items() if k != 'epsilon'}, "missing key 'epsilon'"),
                 'ratio out of range': ({**DEFAULT_SPLIT, 'val_ratio': 2.0}, 'val_ratio'),
                 'wrong type': ({**DEFAULT_SPLIT, 'test_ratio': 'lots'}, 'test_ratio'),
                 'negative floor': ({**DEFAULT_SPLIT, 'floor_k': {'OCR Problems': -1}}, 'floor_k')}

@pytest.mark.parametrize('case', SPLIT_CONFIGS)
def test_bad_split_config(case, world, workspace, tmp_path):
    config, sub = SPLIT_CONFIGS[case]
    before = snapshot(workspace)
    with pytest.raises(ConfigError, match=sub): split_call(workspace, world, config=config)
    yml = tmp_path/'split.yaml'
    yml.write_text(json.dumps(config))  # JSON is YAML: the same through a config file
    with pytest.raises(ConfigError, match=sub): split_call(workspace, world, config=yml)
    assert snapshot(workspace) == before

def test_broken_yaml_config_names_the_file(world, workspace, tmp_path):
    yml = tmp_path/'split.yaml'
    yml.write_text('seed: [1, 2\ntest_ratio: 0.2\n')
    with pytest.raises(ConfigError) as e: split_call(workspace, world, config=yml)
    assert 'split.yaml' in str(e.value)

ROLE_ENVS = {'negative concurrency': ({'CONCURRENCY': '-4'}, 'TREETRM_AGENT_CONCURRENCY'),
             'timeout not a number': ({'TIMEOUT': 'soon'}, 'TREETRM_AGENT_TIMEOUT'),
             'negative retries': ({'MAX_RETRIES': '-1'}, 'TREETRM_AGENT_MAX_RETRIES'),
             'thinking not a bool': ({'THINKING': 'maybe'}, 'TREETRM_AGENT_THINKING'),
             'no endpoint': ({'BASE_URL': ''}, 'TREETRM_AGENT_BASE_URL')}

@pytest.mark.parametrize('case', ROLE_ENVS)
def test_bad_role_environment(case, tmp_path):
    extra, var = ROLE_ENVS[case]
    env = {'TREETRM_AGENT_MODEL': 'sim-agent', 'TREETRM_AGENT_BASE_URL': 'http://127.0.0.1:9/v1',
           'TREETRM_AGENT_API_KEY': 'sk-x'}
    env |= {f'TREETRM_AGENT_{k}': v for k, v in extra.items()}
    with pytest.raises(ConfigError, match=var): make_providers('openai', roles=('agent',), env=env, dotenv_path=None)
    with pytest.raises(ConfigError, match='unknown backend'): make_providers('vllm')
    with pytest.raises(ConfigError, match='unknown role'): load_role_config('critic', env=env)

RUNNER_CONFIGS = {'unknown setting': (dict(config={'epochz': 2}), 'epochz'),
                  'zero epochs': (dict(config={'epochs': 0}), 'epochs'),
                  'unknown acceptance': (dict(config={'acceptance': 'vibes'}), 'acceptance'),
                  'unknown backend': (dict(backend='vllm'), 'unknown backend'),
                  'negative concurrency': (dict(concurrency=-1), 'concurrency')}

@pytest.mark.parametrize('case', list(RUNNER_CONFIGS))
def test_bad_runner_settings(case, world, workspace):
    kw, sub = RUNNER_CONFIGS[case]
    before = snapshot(workspace)
    with pytest.raises(ConfigError, match=sub): Runner(workspace, data_dir=world, progress=False, **kw)
    assert snapshot(workspace) == before

@pytest.mark.parametrize('concurrency', [-3, 0, 2.5, '4'])
def test_bad_concurrency_in_inference_and_diagnosis(concurrency, world, tmp_path):
    log = HarnessLog(tmp_path/'harness.db')
    qs = load_questions(world/'questions.jsonl')
    with pytest.raises(ConfigError, match='concurrency'):
        asyncio.run(run_inference(qs, trees_dir=world/'trees', provider=SimAgent(world), log=log, run_id='r',
                                  skills_dir=SKILLS, concurrency=concurrency, progress=False))
    with pytest.raises(ConfigError, match='concurrency'):
        asyncio.run(diagnose(qs, log=log, baseline_run_id='r', judge=make_role('sim-judge', world), skills_dir=SKILLS,
                             concurrency=concurrency))
    assert log.runs().height == 0
    log.close()

@pytest.mark.parametrize('concurrency', [-3, '4'])
def test_bad_concurrency_leaves_the_workspace_unchanged(concurrency, world, workspace):
    before = snapshot(workspace)
    with pytest.raises(ConfigError, match='concurrency'): split_call(workspace, world, concurrency=concurrency)
    assert snapshot(workspace) == before

# ---------------------------------------------------------------- notebook parameters (papermill)

NOTEBOOK_CASES = {'split: unknown backend': ('split.ipynb', dict(backend='vllm'), 'unknown backend'),
                  'split: negative concurrency': ('split.ipynb', dict(concurrency=-2), 'concurrency'),
                  'train: wrong type': ('train.ipynb', dict(epochs='two'), 'epochs')}

@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize('case', list(NOTEBOOK_CASES))
def test_bad_notebook_parameters(case, world, workspace, tmp_path):
    nb, params, sub = NOTEBOOK_CASES[case]
    before = snapshot(workspace)
    with pytest.raises(pm.PapermillExecutionError) as e:
        pm.execute_notebook(str(ROOT/'nbs'/nb), str(tmp_path/'out.ipynb'),
                            parameters=dict(workspace=str(workspace), data_dir=str(world), **params),
                            kernel_name='python3', cwd=str(ROOT/'nbs'), progress_bar=False)
    assert e.value.ename == 'ConfigError' and sub in e.value.evalue, (e.value.ename, e.value.evalue)
    assert snapshot(workspace) == before

# ---------------------------------------------------------------- model outputs

class Scripted:
    "A model that always replies `text` (or `text(messages)`)."
    def __init__(self, text, model='scripted'): self.text, self.model, self.calls = text, model, 0
    async def chat(self, messages, **kw):
        self.calls += 1
        return LLMResponse(self.text(messages) if callable(self.text) else self.text,
                           usage={'prompt_tokens': 1, 'completion_tokens': 1}, model=self.model)

def action(tool, **args): return json.dumps({'reflect': {}, 'plan': '', 'action': {'tool': tool, 'args': args}})

AGENT_OUTPUTS = {  # reply -> (stop reason, prediction)
    'not JSON': ('I think the answer is somewhere in the video.', 'parse_error'),
    'JSON without action': (json.dumps({'reflect': {}, 'plan': 'look around'}), 'parse_error'),
    'action not an object': (json.dumps({'action': 'submit_answer'}), 'parse_error'),
    'answer outside A-D': (action('submit_answer', answer='E'), 'budget_exceeded'),
    'answer not a letter': (action('submit_answer', answer='the red one'), 'budget_exceeded'),
    'unknown tool': (action('rm', path='../../etc'), 'budget_exceeded'),
    'node outside the tree': (action('view_node', node_id='../../../etc/passwd'), 'budget_exceeded'),
}

@pytest.mark.parametrize('case', AGENT_OUTPUTS)
def test_bad_agent_output_is_recorded_not_answered(case, world, tmp_path):
    reply, stop = AGENT_OUTPUTS[case]
    qs, log, skills = load_questions(world/'questions.jsonl')[:3], HarnessLog(tmp_path/'harness.db'), tmp_path/'skills'
    shutil.copytree(SKILLS, skills)
    before = snapshot(skills)
    res = asyncio.run(run_inference(qs, trees_dir=world/'trees', provider=Scripted(reply), log=log, run_id='r',
                                    skills_dir=skills, max_steps=3, progress=False))
    p = log.predictions('r')
    log.close()
    assert (res.n == 3 and set(p['stop_reason']) == {stop} and p['prediction'].null_count() == 3
            and not p['correct'].any())
    if stop == 'budget_exceeded':  # every bad call came back to the model as a tool error, none as an answer
        outputs = [s['output'] for j in p['steps_json'] for s in json.loads(j)]
        assert all('[tool error]' in o for o in outputs if o), outputs[:3]
    assert snapshot(skills) == before

JUDGE_OUTPUTS = {'not JSON': 'The agent missed it.', 'wrong schema': json.dumps({'verdict': 'bad'}),
                 'unknown tier': json.dumps({'tier': 'T9', 'error_type': 'missed_evidence', 'cause': 'x',
                                             'missed_nodes': [], 'skill_adherence': 'followed',
                                             'evolution_target': None, 'confidence': 0.5}),
                 'target outside the skills': json.dumps({'tier': 'T2', 'error_type': 'missed_evidence', 'cause': 'x',
                                                          'missed_nodes': [], 'skill_adherence': 'followed',
                                                          'evolution_target': '../../etc/passwd', 'confidence': 0.5})}

def test_bad_judge_output_is_a_degraded_signal(world, tmp_path):
    qs = load_questions(world/'questions.jsonl')
    log = HarnessLog(tmp_path/'harness.db')
    asyncio.run(run_inference(qs, trees_dir=world/'trees', provider=SimAgent(world), log=log, run_id='base',
                              skills_dir=SKILLS, progress=False))
    wrong = log.predictions('base').filter(~pl.col('correct')).height
    assert wrong > 0
    for i, (case, reply) in enumerate(JUDGE_OUTPUTS.items()):
        res = asyncio.run(diagnose(qs, log=log, baseline_run_id='base', judge=Scripted(reply), skills_dir=SKILLS,
                                   prompt_version=f'p{i}', parse_retries=1))
        assert res.n_degraded == res.n_judged == wrong, case
        assert res.signals['tier'].null_count() == wrong and res.signals['evolution_target'].null_count() == wrong, case
        assert all('unparseable judge reply' in c for c in res.signals['cause']), (case, res.signals['cause'][0])
    log.close()

EDIT_CASES = sorted(n for n in expect('skills') if n.endswith('.json'))
OTHER_FILE = {'length-ratio-too-small.json'}  # edits object-reasoning.md: asked for that file
# read as an evolver reply first
NOT_AN_EDIT = {'schema-empty-ops.json': 'no_change', 'schema-not-an-object.json': 'schema'}

@pytest.mark.parametrize('name', EDIT_CASES + ['<not JSON>', '<truncated>'])
def test_bad_evolver_output_is_a_recorded_rejection(name, tmp_path):
    skills = tmp_path/'v1'
    shutil.copytree(CORPUS/'skills'/'fixture', skills)
    before = snapshot(skills)
    text = {'<not JSON>': 'Add a rule about counting twice.',
            '<truncated>': '{"target": "counting-problem.md", "ops": [{"op": "app'}.get(name)
    text = text or (CORPUS/'skills'/name).read_text()
    target = 'object-reasoning.md' if name in OTHER_FILE else 'counting-problem.md'
    evolver = Scripted(text)
    p = asyncio.run(propose_edit('Counting Problem', skills_dir=skills, case_pack={'failures': [], 'successes': []},
                                 evolver=evolver, target=target))
    assert (not p.ok and p.status in ('invalid', 'no_change') and p.new_text is None and p.files == {}), (p.status,
                                                                                                          p.reason)
    assert p.reason in (*REJECT_REASONS, 'not_json', 'truncated'), p.reason
    if name in expect('skills') and name not in NOT_AN_EDIT:
        for s in expect('skills')[name]: assert s in p.message, (s, p.message)
    assert snapshot(skills) == before

def test_training_records_rejected_edits_and_changes_no_skill(tmp_path):
    ("A whole training run whose evolver only proposes edits that escape the skills folder: "
     "every one is rejected and recorded.")
    world = make_world(tmp_path/'world', seed=2, n_videos=8)
    bad = lambda messages: json.dumps({'target': '../../manifest.json',
                                       'ops': [{'op': 'append_to_section', 'section': 'Strategy', 'text': '- x'}]})
    evolver = Scripted(bad, model='sim-evolver')
    r = Runner(tmp_path/'ws', data_dir=world, progress=False, concurrency=8,
               providers={'agent': SimAgent(world), 'judge': make_role('sim-judge', world), 'evolver': evolver},
               config=dict(epochs=1, min_ladder_units=3, ladder_cap=12, momentum=False,
                           batch=dict(batch_size=8, min_class=2, correct_ratio=0.2), gate=dict(min_n=5)),
               split_config=dict(seed=0, test_ratio=0.3, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.5,
                                 val_wrong_min=2))
    res = asyncio.run(r.train('v1'))
    r.log.close()
    proposals = [d for d in res.state.decisions if d.get('kind') == 'proposal']
    assert evolver.calls > 0 and len(proposals) == evolver.calls
    assert {(d['decision'], d['reason']) for d in proposals} == {('invalid', 'bad_target')}
    assert sorted(p.name for p in (tmp_path/'ws'/'skills').iterdir()) == ['v1']  # no version beyond the seed
    assert not (tmp_path/'ws'/'tmp'/'candidates').exists() or not any((tmp_path/'ws'/'tmp'/'candidates').iterdir())
