("Training killed with SIGKILL at several points resumes, with the same run_id, to the same decisions, "
 "skills and metrics as an uninterrupted run — and never re-runs an answer that was already persisted.")
import json, os, shutil, signal, sqlite3, subprocess, sys
from pathlib import Path

import pytest

from treetrm.core import project_root
from treetrm.sim.world import make_world, world_questions
from treetrm.sim.sim_agent import parse_first_user

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

ROOT = project_root()

DRIVER = r'''
import asyncio, json, os, signal, sys
from pathlib import Path
from treetrm.train.runner import Runner
from treetrm.llm.ledger import current_run_id
from treetrm.llm.backends import make_providers

ws, world, record, what = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
CFG = dict(epochs=2, min_ladder_units=8, batch=dict(batch_size=8, min_class=2, correct_ratio=0.2))
kill_call, kill_event, kill_nth = (int(os.environ.get('KILL_AGENT_CALL', '0')), os.environ.get('KILL_EVENT', ''),
                                   int(os.environ.get('KILL_NTH', '1')))

class Agent:
    "The sim agent, counting its calls, logging each conversation's first turn, and killing the process at call N."
    def __init__(self, inner): self.inner, self.model, self.n, self.out = inner, inner.model, 0, open(record, 'a')
    async def chat(self, messages, **kw):
        self.n += 1
        if self.n == kill_call: os.kill(os.getpid(), signal.SIGKILL)
        self.out.write(json.dumps({'run': current_run_id(), 'first': len(messages) == 2,
                                   'user': messages[1]['content']}) + '\n')
        self.out.flush()
        return await self.inner.chat(messages, **kw)

seen = []
def on_event(name, info):
    if name == kill_event:
        seen.append(name)
        if len(seen) == kill_nth: os.kill(os.getpid(), signal.SIGKILL)

providers = make_providers('sim', world_dir=world, roles=('agent', 'judge', 'evolver'))
providers['agent'] = Agent(providers['agent'])
runner = Runner(ws, data_dir=world, split_config=SPLIT, config=CFG, concurrency=4, progress=False, providers=providers)
if what == 'split': asyncio.run(runner.split())
else:
    res = asyncio.run(runner.train('r1', on_event=on_event))
    print('RESULT ' + json.dumps(res.metrics))
'''


def drive(tmp, ws, world, what, record, **env):
    script = tmp/'driver.py'
    if not script.exists(): script.write_text(DRIVER)
    e = {**os.environ, **{k: str(v) for k, v in env.items()}, 'TREETRM_ROOT': str(ROOT)}
    p = subprocess.run([sys.executable, str(script), str(ws), str(world), str(record), what], env=e,
                       capture_output=True, text=True, timeout=120)
    return p


def metrics_of(p):
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(next(l for l in p.stdout.splitlines() if l.startswith('RESULT '))[7:])


def persisted(ws) -> set:
    with sqlite3.connect(ws/'harness.db') as c: return set(c.execute('SELECT run_id, question_id FROM predictions'))


def first_turns(record, world) -> list:
    index = world_questions(world)
    out = []
    for line in Path(record).read_text().splitlines():
        r = json.loads(line)
        if r['first']:
            q = parse_first_user(r['user'])
            out.append((r['run'], index[(q.video_id, q.question)].question_id))
    return out


def best_files(ws, version) -> dict:
    return {p.name: p.read_text() for p in sorted((ws/'skills'/version).glob('*.md'))}


@pytest.fixture(scope='module')
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('resume')
    world = make_world(tmp/'world', seed=1, n_videos=16)
    p = drive(tmp, tmp/'base', world, 'split', tmp/'split.jsonl')
    assert p.returncode == 0, p.stderr[-3000:]
    ref_ws = tmp/'ref'
    shutil.copytree(tmp/'base', ref_ws)
    ref = metrics_of(drive(tmp, ref_ws, world, 'train', tmp/'ref.jsonl'))
    calls = len(Path(tmp/'ref.jsonl').read_text().splitlines())
    return tmp, world, ref, ref_ws, calls


KILLS = {'after_rollout': dict(KILL_EVENT='rollout_done', KILL_NTH=2),
         'after_new_version': dict(KILL_EVENT='version_created', KILL_NTH=1),
         'after_epoch_update': dict(KILL_EVENT='epoch_done', KILL_NTH=1),
         'agent_call_30pct': dict(KILL_AGENT_CALL=0.3), 'agent_call_75pct': dict(KILL_AGENT_CALL=0.75)}


@pytest.mark.parametrize('point', list(KILLS))
def test_sigkill_then_resume_matches_uninterrupted(base, point):
    tmp, world, ref, ref_ws, calls = base
    ws = tmp/point
    shutil.copytree(tmp/'base', ws)
    env = dict(KILLS[point])
    if 'KILL_AGENT_CALL' in env: env['KILL_AGENT_CALL'] = max(1, int(env['KILL_AGENT_CALL'] * calls))
    killed = drive(tmp, ws, world, 'train', tmp/f'{point}_1.jsonl', **env)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
    ckpt = json.loads((ws/'runs'/'r1'/'checkpoint.json').read_text())
    assert ckpt['state']['phase'] != 'done'
    before = persisted(ws)
    resumed = metrics_of(drive(tmp, ws, world, 'train', tmp/f'{point}_2.jsonl'))
    # the same decisions, delivered skills and test metrics as the uninterrupted run
    assert resumed['decision_fingerprint'] == ref['decision_fingerprint']
    assert (resumed['test'] == ref['test'] and resumed['epochs'] == ref['epochs'] and resumed['confirmed_rules']
            == ref['confirmed_rules'])
    assert resumed['best_version'] == ref['best_version']
    assert best_files(ws, resumed['best_version']) == best_files(ref_ws, ref['best_version'])
    # no answer persisted before the kill was computed again after it
    again = [t for t in first_turns(tmp/f'{point}_2.jsonl', world) if t in before]
    assert not again, again[:5]
