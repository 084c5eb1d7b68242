"""What a newcomer tripped on (issue 51), the loose ends: call counts that differ between runs of one decision log,
the train stage's final test after earlier looks, a progress bar that stopped short, the build ledger's write-ahead
row, notebooks' temporary folders, the process pool's workers, a provider's `aclose`, failover rows and the budget,
the seed probe's calls, pair seeds on legacy worlds, and the DSPy example's two measurements of one program."""
import asyncio, random

import polars as pl
import pytest

from treetrm.bench.loop_bench import GRID_TYPES, DEFAULT_GRID_SPLIT
from treetrm.log import FINAL_TEST
from treetrm.sim.world import make_world

SPLIT = dict(DEFAULT_GRID_SPLIT, val_wrong_min=2)


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    "A realistic world whose gates stop early: their ladders are long enough to run ahead of the decision."
    return make_world(tmp_path_factory.mktemp('loose')/'world', seed=2, n_videos=40, profile='realistic',
                      questions_per_video=GRID_TYPES)


class Jittered:
    "The agent model behind a network of varying latency: each call waits a random 0-3 ms (seeded) first."
    def __init__(self, inner, seed): self.inner, self.rng = inner, random.Random(seed)
    @property
    def model(self): return self.inner.model
    async def chat(self, messages, **kw):
        await asyncio.sleep(self.rng.random() * 0.003)
        return await self.inner.chat(messages, **kw)


def _runner(folder, world, agent, **config):
    from treetrm.sim.roles import SimJudge, SimEvolver
    from treetrm.train.runner import Runner
    roles = {'agent': agent, 'judge': SimJudge(world, 0), 'evolver': SimEvolver(world, 0)}
    cfg = dict(epochs=1, patience=50, min_ladder_units=4, batch=dict(batch_size=8, min_class=4, correct_ratio=0.2))
    return Runner(folder, data_dir=world, config=cfg | config, split_config=SPLIT, concurrency=8, providers=roles,
                  progress=False)


# item 16: one sweep run's calls were 7,541, 7,539 and 7,561, and three demo runs with one decision fingerprint spent
# 5,275, 5,306 and 5,285 agent calls. The cause: a gate runs both arms of the next units of every gated type at once;
# when a type's gate decides, the arms still running finish and their answers go unused, and how many were running
# depends on timing (on the sim backend, on when worker threads finish writing answers to harness.db; on a real
# endpoint, on its latency). The run now reports those calls; the rest of its calls is the same on every run.
@pytest.mark.slow
def test_calls_differ_only_by_the_gate_arms_no_gate_used(tmp_path, world):
    from treetrm.sim.sim_agent import SimAgent
    from treetrm.train.checkpoint import decision_fingerprint
    seen = []
    for i in range(3):  # three networks: each call's wait differs, so different arms are running when a gate decides
        r = _runner(tmp_path/f'ws{i}', world, Jittered(SimAgent(world, 0), i))
        res = asyncio.run(r.train('b', acceptance='gate'))
        training = r.run_calls(res.internal_run_id).filter(~pl.col('run_id').str.ends_with(FINAL_TEST))
        agent = training.filter(pl.col('role') == 'agent').height
        seen.append((decision_fingerprint(res.state.decisions), agent, res.metrics['speculative_calls']))
        table = r.forecast_table(res.metrics['forecast'], res.internal_run_id)
        row = table.filter(pl.col('role') == 'agent').row(0, named=True)
        assert row['actual_speculative_calls'] == res.metrics['speculative_calls'], table  # beside the call count
        r.log.close()
    assert len({fingerprint for fingerprint, _, _ in seen}) == 1, seen  # one decision log
    assert any(speculative > 0 for *_, speculative in seen), seen  # the gates did run ahead of their decisions
    # what varies is exactly those calls: every other agent call of the run is the same on every run
    assert len({agent - speculative for _, agent, speculative in seen}) == 1, seen


# carried over: `RecordedProvider` (the sim backend's and `providers=`'s wrapper) hid its inner provider's `aclose`, so
# a caller could not close the HTTP clients of a provider it had handed to a Runner
class Closable:
    "A provider that holds a connection until `aclose`."
    model, closed = 'closable', 0
    async def chat(self, messages, **kw): raise AssertionError('not called')
    async def aclose(self): self.closed += 1


def test_a_recorded_provider_closes_the_provider_it_wraps():
    from treetrm.llm.ledger import RecordedProvider
    from treetrm.llm.protocol import ClosableProvider
    from treetrm.sim.roles import SimEcho
    inner = Closable()
    wrapped = RecordedProvider(inner, 'agent', [].append)
    assert isinstance(wrapped, ClosableProvider)
    asyncio.run(wrapped.aclose())
    assert inner.closed == 1
    asyncio.run(RecordedProvider(SimEcho(), 'agent', [].append).aclose())  # nothing to close: nothing happens


# carried over: `executors.stop_workers` read the pool's private `_processes`; it now uses the public
# `terminate_workers()` where Python has it (3.14), and says why it reads `_processes` below that
class PublicPool:
    "A pool with Python 3.14's public `terminate_workers` and none of the private attributes."
    def __init__(self): self.calls = []
    def terminate_workers(self): self.calls.append('terminate_workers')
    def shutdown(self, wait=True, *, cancel_futures=False): self.calls.append(('shutdown', wait, cancel_futures))


def test_stop_workers_uses_the_public_call_where_python_has_it():
    from treetrm.executors import stop_workers
    pool = PublicPool()
    stop_workers(pool)
    assert pool.calls == ['terminate_workers'], pool.calls  # it cancels the queued jobs and ends the running ones


def test_stop_workers_ends_the_workers_of_a_real_pool():
    import concurrent.futures as cf, multiprocessing as mp, time
    from treetrm.executors import stop_workers
    before = set(mp.active_children())  # children other tests of this process may have left running
    pool = cf.ProcessPoolExecutor(2, mp_context=mp.get_context('spawn'))
    running = [pool.submit(time.sleep, 60) for _ in range(2)]
    while not all(f.running() for f in running): time.sleep(0.05)
    workers = [p for p in mp.active_children() if p not in before]
    stop_workers(pool)  # on this Python (3.11) through the pool's own record of its processes
    # the pool's manager thread reaps its workers too, and while it does `is_alive()` can still say True for one
    # that has ended (its waitpid lost the race): wait for that to settle; a worker left running sleeps for 60 s
    deadline = time.monotonic() + 20
    while any(p.is_alive() for p in workers) and time.monotonic() < deadline: time.sleep(0.05)
    assert len(workers) == 2 and not any(p.is_alive() for p in workers)


# carried over: a grid with `pair_seeds` on worlds made as before the noise settings (`realism.NOISE_LEGACY`, coupling
# None: both arms' draws keyed by the request seed alone) coupled a pair's arms fully, without a word
def test_pair_seeds_on_fully_coupled_worlds_warn(tmp_path):
    from treetrm.bench.grid import BenchSettings, FullCoupling, realistic_world
    from treetrm.bench.loop_bench import run_grid
    from treetrm.sim.realism import NOISE_LEGACY
    legacy = realistic_world('balanced', 0.2, 60, **NOISE_LEGACY)
    with pytest.warns(FullCoupling) as said:
        asyncio.run(run_grid([legacy], seeds=(), settings=BenchSettings(pair_seeds=True), workdir=tmp_path,
                             verbose=False))
    text = str(said[0].message)
    assert 'coupling' in text and 'NOISE_LEGACY' in text and 'share their whole draw' in text, text
    assert 'pair_seeds' in text and 'coupling: 0.64' in text, text  # what to do instead
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error', FullCoupling)  # neither pair seeds off nor a measured coupling warns
        for world, settings in ((legacy, BenchSettings()), (realistic_world(), BenchSettings(pair_seeds=True))):
            asyncio.run(run_grid([world], seeds=(), settings=settings, workdir=tmp_path, verbose=False))


# carried over: the training bar's total is the planned steps (epochs x the first epoch's batches), so a run that
# stops early (patience, a spent budget, another epoch's batch count) left it short of its total, e.g. "5/8"
@pytest.fixture(scope='module')
def small_world(tmp_path_factory):
    "A small realistic world: a training run on it takes a few seconds."
    return make_world(tmp_path_factory.mktemp('small')/'world', seed=2, n_videos=16, profile='realistic',
                      questions_per_video=GRID_TYPES)


def test_the_training_bar_ends_at_its_total(tmp_path, small_world, monkeypatch):
    import tqdm.auto
    from treetrm.sim.sim_agent import SimAgent
    closed = []

    class Recorded(tqdm.auto.tqdm):
        def close(self):
            if self.desc.startswith('train') and not self.disable: closed.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(tqdm.auto, 'tqdm', Recorded)
    r = _runner(tmp_path/'ws', small_world, SimAgent(small_world, 0, one_call=True), epochs=6, patience=1)
    r.progress = True
    res = asyncio.run(r.train('b', acceptance='gate'))
    r.log.close()
    planned = 6 * len(res.state.batches)
    assert res.state.stopped_early and res.state.global_step < planned  # the plan the bar started with was not run
    assert closed == [(res.state.global_step, res.state.global_step)], closed  # it closed on the steps done


# carried over: the eval stage warns from the second look at a workspace's test pool on (`RepeatedTestLook`); the train
# stage's final test, a look too, said nothing after earlier evaluations of the test pool
def test_the_final_test_after_earlier_looks_warns_as_eval_does(tmp_path, small_world):
    import warnings
    from treetrm.sim.sim_agent import SimAgent
    from treetrm.train.workspace import RepeatedTestLook
    first = _runner(tmp_path/'first', small_world, SimAgent(small_world, 0, one_call=True))
    with warnings.catch_warnings():
        warnings.simplefilter('error', RepeatedTestLook)  # a workspace's first look says nothing
        asyncio.run(first.train('b', acceptance='gate'))
    first.log.close()
    r = _runner(tmp_path/'ws', small_world, SimAgent(small_world, 0, one_call=True))
    asyncio.run(r.split())
    asyncio.run(r.eval('seed', 'test'))  # look 1: the seed skills on the test pool
    with pytest.warns(RepeatedTestLook) as said:
        res = asyncio.run(r.train('b', acceptance='gate'))
    r.log.close()
    text = str(said[0].message)
    final = res.metrics['test']['delivered_run']
    assert f"run {final} is look 2 at this workspace's test pool (before it: eval_test_v1)" in text, text
    assert 'biases the reported gain upward' in text and 'say how many looks the test pool had' in text, text


# carried over: the build's ledger wrote a vision call's row only after the call finished, so a build killed mid-call
# left no trace of a request that may have been billed; `CallRecorder` (harness.db) writes its row before the request
class Killed(BaseException):
    "The process dies mid-call: nothing after it runs."


class Vision:
    "A vision provider whose replies are scripted: a card, an error, a hang, or the process dying."
    model = 'scripted-vision'
    def __init__(self, then): self.then, self.seen = then, []
    async def chat(self, messages, **kw):
        from treetrm.llm.protocol import LLMResponse
        self.seen.append(self.rows())  # what the ledger holds while the request is out
        if self.then == 'card':
            return LLMResponse('{"scene_summary": "a kitchen"}', usage={'prompt_tokens': 5, 'completion_tokens': 3},
                               model=self.model)
        if self.then == 'error': raise RuntimeError('HTTP 500')
        if self.then == 'hang': await asyncio.sleep(30)
        raise Killed()


@pytest.mark.parametrize('then, status', [('card', 'ok'), ('error', 'error'), ('hang', 'cancelled'),
                                          ('dies', 'sent')])
def test_the_build_ledger_writes_a_call_before_it_goes_out(tmp_path, then, status):
    from treetrm.build.vision import BuildLedger, VisionCaller, build_messages, card_schema
    from treetrm.core import Slots
    ledger = BuildLedger(tmp_path/'ledger.sqlite')
    provider = Vision(then)
    provider.rows = lambda: ledger.calls().select('node_id', 'status').rows()
    caller = VisionCaller(provider, ledger, Slots(1))
    ask = caller.ask(build_messages('Describe $context', {'a': 1}), [], card_schema(1), video_id='v1', node_id='n1',
                     kind='scene')

    async def go():
        task = asyncio.create_task(ask)
        if then == 'hang':
            await asyncio.sleep(0.05)
            task.cancel()
        return await task
    try: asyncio.run(go())
    except (RuntimeError, Killed, asyncio.CancelledError): pass
    assert provider.seen == [[('n1', 'sent')]]  # the row was there before the request went out
    assert ledger.calls().select('node_id', 'status').rows() == [('n1', status)]  # one row, its outcome (or 'sent')
    ledger.close()


# carried over: `nbdev_test` left `tmp*` folders behind: notebooks made folders with `tempfile.mkdtemp()` and never
# removed them, or kept a `TemporaryDirectory` without cleaning it up at the end; the throughput benchmarks made a
# scratch workspace the same way whenever no `workdir` was given
NBS = __import__('pathlib').Path(__file__).resolve().parents[1]/'nbs'


def _code(nb) -> str:
    import json
    return '\n'.join(''.join(c['source']) for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'code')


def test_notebooks_remove_the_temporary_folders_they_make():
    import re
    left = []
    for nb in sorted(NBS.rglob('*.ipynb')):
        code = _code(nb)
        left += [f'{nb.relative_to(NBS)}: {m.group(0).strip()}' for m in re.finditer(r'.*mkdtemp\((?!dir=).*', code)]
        for name in re.findall(r'^(\w+) = (?:tempfile|_tf)\.TemporaryDirectory\(', code, re.M):
            if f'{name}.cleanup()' not in code: left.append(f'{nb.relative_to(NBS)}: {name} is never cleaned up')
    assert not left, '\n'.join(left)


@pytest.mark.slow
def test_nbdev_test_of_a_notebook_leaves_no_temporary_folder(tmp_path):
    import os, shutil, subprocess, sys
    nbdev_test = shutil.which('nbdev_test', path=os.path.dirname(sys.executable))
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(NBS.parent))
    done = subprocess.run([nbdev_test, '--path', str(NBS/'agent'/'02_tools.ipynb')], cwd=NBS.parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(tmp_path.iterdir()), sorted(p.name for p in tmp_path.iterdir())


def test_the_throughput_benchmark_removes_its_scratch_workspace(tmp_path, small_world, monkeypatch):
    import tempfile
    from treetrm.bench.throughput import benchmark_throughput
    scratch = tmp_path/'scratch'
    scratch.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
    figures = asyncio.run(benchmark_throughput(small_world, n_questions=4, latency_s=0.001, concurrency=2,
                                               cpu_questions=2))
    assert figures['n_questions'] == 4 and not list(scratch.iterdir()), list(scratch.iterdir())
    kept = tmp_path/'kept'
    asyncio.run(benchmark_throughput(small_world, n_questions=4, latency_s=0.001, concurrency=2, cpu_questions=2,
                                     workdir=kept))
    assert sorted(p.name for p in kept.glob('*.db')) == ['cpu.db', 'latency.db']  # a workdir given is the caller's


# carried over: a run with pair seeds first asks the agent whether it honours request seeds (the seed probe); its calls
# were filed under no run and taken from no budget. The split's calls (the baseline run, the diagnosis and the redraw
# that measures the discordance) are spent before any training run, once for every run of the workspace: a run's
# budget does not count them, and the run now says so where the budget is set.
def test_the_seed_probe_counts_against_the_run_and_its_budget(tmp_path, small_world):
    from treetrm.sim.sim_agent import SimAgent
    limit = 160
    r = _runner(tmp_path/'ws', small_world, SimAgent(small_world, 0, one_call=True), max_calls=limit,
                pair_seeds=True, epochs=50, patience=50)  # the budget ends the run
    res = asyncio.run(r.train('b', acceptance='gate'))
    rid = res.internal_run_id
    probe = r.log.frame('llm_calls').filter(pl.col('run_id') == f'{rid}_init_seed_probe')
    assert probe.height >= 3 and set(probe['role']) == {'agent'}  # each probe question three times
    assert r.log.frame('llm_calls').filter(pl.col('run_id') == '').height == 0  # no call filed under no run
    assert r.training_calls(rid) == limit  # the budget took the probe's calls with the rest, and none past it
    assert res.metrics['actual']['agent']['calls'] == r.run_calls(rid).filter(pl.col('role') == 'agent').height
    r.log.close()


def test_a_budget_says_the_split_is_not_in_it(tmp_path, small_world, capsys):
    from treetrm.sim.sim_agent import SimAgent
    r = _runner(tmp_path/'ws', small_world, SimAgent(small_world, 0, one_call=True), max_calls=150)
    asyncio.run(r.split())
    split_calls = r.log.frame('llm_calls').height
    capsys.readouterr()
    asyncio.run(r.train('b', acceptance='gate'))
    r.log.close()
    said = capsys.readouterr().out
    assert (f"max_calls = 150 counts this run's training calls (the seed probe's too); the split's {split_calls} "
            'calls (the baseline run, the diagnosis, and the redraw that measures the discordance)') in said, said


# carried over: one call through an `EndpointPool` that fails over writes a row per endpoint it tried, and the budget
# takes the call once; a resumed run's budget starts from the rows, so each failover cost it one more call
def test_a_failover_counts_once_against_a_resumed_budget(tmp_path, small_world):
    from treetrm.core import CallBudget
    from treetrm.llm.backends import EndpointPool, make_providers
    from treetrm.llm.ledger import call_budget, filed_under
    from treetrm.sim.server import serve
    from treetrm.train.workspace import Workspace
    ws = Workspace(tmp_path/'ws', backend='sim')
    msgs = [{'role': 'user', 'content': 'What is on the jar?'}]
    with serve(world_dir=small_world, seed=0) as srv:
        env = {'TREETRM_JUDGE_MODEL': 'sim-echo', 'TREETRM_JUDGE_API_KEY': 'sk-dummy',
               'TREETRM_JUDGE_BASE_URL': f'http://127.0.0.1:9/v1,{srv.base_url}'}  # the first refuses connections
        pool = make_providers('openai', roles=('judge', ), env=env, telemetry=ws.recorder)['judge']
        assert isinstance(pool, EndpointPool)
        budget = CallBudget(10)

        async def one_call():
            from treetrm.llm.ledger import BudgetedProvider
            try:
                with filed_under('r_e1s1_evolve'), call_budget(budget): await BudgetedProvider(pool).chat(msgs)
            finally: await pool.aclose()
        asyncio.run(one_call())
    rows = ws.log.frame('llm_calls', 'r_e1s1_evolve')
    assert sorted(rows['status']) == ['error', 'ok'] and budget.used == 1  # two endpoints tried, one call taken
    assert ws.training_calls('r') == 1  # a resumed run's budget starts where the live one stood
    ws.log.record_llm_call(dict(role='agent', status='ok', extra={'failover': 1}), run_id='r_e1s1_rollout')
    ws.log.record_llm_call(dict(role='agent', status='ok'), run_id='r_e1s1_rollout')
    assert ws.training_agent_calls('r') == 1  # so does max_agent_calls
    ws.log.close()
