"The loop benchmark notebook runs under papermill with a tiny grid; its JSON has loop.json's shape, gains from the planted truth, and worker processes give the serial numbers."
import asyncio, gc, json

import papermill as pm

from treetrm.core import ConfigError, project_root
from treetrm.loop_bench import run_grid, BenchSettings, DEFAULT_GRID_SPLIT, GRID_TYPES
from treetrm.sim import true_accuracy, world_questions

ROOT = project_root()
NB = ROOT/'nbs'/'bench'/'loop.ipynb'
RULES = ['gate', 'gepa', 'gepa_veto', 'greedy', 'greedy_margin', 'fixed_n', 'bayes', 'oracle']
TINY = dict(profile='realistic', n_videos=16, questions_per_video=GRID_TYPES)
SETTINGS = dict(min_ladder_units=4, batch_size=8, split=dict(DEFAULT_GRID_SPLIT, val_wrong_min=2))
UNREACHABLE = dict(TINY, realism=dict(flip_rate=0.9))   # the realism model refuses it (reachable: about 0.14 to 0.36)


def test_notebook_is_committed_clean():
    nb = json.loads(NB.read_text())
    assert nb['cells'][0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(nb['cells'][0]['source'])
    assert sum('parameters' in c.get('metadata', {}).get('tags', []) for c in nb['cells']) == 1
    assert all(not c.get('outputs') and not c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code')
    assert not any('asyncio.run' in ''.join(c['source']) for c in nb['cells'])


def test_loop_bench_notebook(tmp_path):
    out, work = tmp_path/'bench'/'loop.json', tmp_path/'work'
    pm.execute_notebook(str(NB), str(tmp_path/'loop_out.ipynb'), kernel_name='python3', cwd=str(ROOT), progress_bar=False,
                        parameters=dict(worlds=[TINY], rules=RULES, seeds=[0], budget=400, processes=1, workdir=str(work), out=str(out),
                                        min_ladder_units=4, batch_size=8, split=SETTINGS['split']))
    s = json.loads(out.read_text())
    assert set(s) >= {'cells', 'wall_s', 'figures', 'bar'} and len(s['cells']) == 1 and list(s['bar']) == ['gate']
    c = s['cells'][0]
    assert {k: c['world'][k] for k in TINY} == json.loads(json.dumps(TINY)) and c['budget'] == 400 and c['seeds'] == [0] and set(c['rules']) == set(RULES)
    for f in s['figures']: assert (out.parent/f).stat().st_size > 5_000
    assert {f.split('.')[0] for f in s['figures']} == {'loop_frontier', 'loop_budget', 'loop_pooled'}
    assert {(r['units'], r['rule']) for r in s['pooled']} == {('16 videos', r) for r in RULES}
    assert all(r['gain'] == c['rules'][r['rule']]['gain']['mean'] for r in s['pooled'])  # one cell: the cell's mean
    ws = next((work/'cell0').glob('w0-*'))
    test = [world_questions(ws/'world')[k] for k in [(q.video_id, q.question) for q in world_questions(ws/'world').values()]
            if k[0] in json.loads((ws/'workspace'/'pools'/'pools.json').read_text())['pools']['test']['videos']]
    seed_acc = 100 * true_accuracy(ws/'world', ws/'workspace'/'skills'/'v1', test)
    for rule, v in c['rules'].items():
        assert set(v) >= {'gain', 'p_worse_than_seed', 'harmful_points', 'regret', 'calls', 'runs'}
        assert set(v['calls']) == {'agent', 'judge', 'evolver'} and sum(v['calls'].values()) <= 400  # the hard budget holds
        (run,) = v['runs']
        assert run['seed'] == 0 and run['worse_than_seed'] == (run['gain'] < -1e-9) and v['gain']['mean'] == run['gain']
        assert abs(v['regret'] - (c['rules']['oracle']['gain']['mean'] - run['gain'])) < 1e-9 and len(v['regret_ci']) == 2
        assert v['gain']['ci'][0] <= v['gain']['mean'] <= v['gain']['ci'][1]
    # the gain is the truth of the delivered files: recompute the oracle's from its workspace's final version
    assert abs(c['rules']['oracle']['runs'][0]['gain'] + seed_acc - (seed_acc + c['rules']['oracle']['gain']['mean'])) < 1e-9


def test_processes_give_the_serial_numbers(tmp_path):
    kw = dict(rules=('greedy', 'gate'), budget=300, seeds=(0, 1), settings=BenchSettings(**SETTINGS), verbose=False)
    serial = asyncio.run(run_grid([TINY], processes=1, workdir=tmp_path/'a', **kw))
    parallel = asyncio.run(run_grid([TINY], processes=2, workdir=tmp_path/'b', **kw))
    strip = lambda s: [{r: {k: x for k, x in v.items() if k not in ('runs', 'wall_s')} | {'runs': [{k: x for k, x in run.items() if k != 'wall_s'} for run in v['runs']]}
                        for r, v in c['rules'].items()} for c in s['cells']]
    assert strip(serial) == strip(parallel)


def test_a_failed_job_names_its_world_and_seed_and_keeps_the_finished(tmp_path):
    "A world whose noise cannot be reached fails with the cell and world seed named; the job before it stays on disk."
    kw = dict(rules=('greedy', ), budget=200, seeds=(0, ), settings=BenchSettings(**SETTINGS), verbose=False)
    try:
        asyncio.run(run_grid([TINY, UNREACHABLE], processes=1, workdir=tmp_path, **kw))
        raise AssertionError('the unreachable world was built')
    except ConfigError as e:
        assert 'flip_rate 0.9 cannot be reached' in str(e)
        assert any('grid cell 1' in n and 'world seed 0' in n and str(tmp_path) in n for n in e.__notes__), e.__notes__
    assert len(list((tmp_path/'cell0').glob('rows-*.json'))) == 1 and not list((tmp_path/'cell1').glob('rows-*.json'))


def test_failed_jobs_in_workers_leave_no_unretrieved_future(tmp_path):
    "Every job of a worker pool failing raises the first failure once; the others' are not left for asyncio to log."
    kw = dict(rules=('greedy', ), budget=200, seeds=(0, 1), settings=BenchSettings(**SETTINGS), verbose=False)
    unretrieved = []

    async def grid_then_collect():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: unretrieved.append(ctx['message']))
        try:
            await run_grid([UNREACHABLE], processes=2, workdir=tmp_path, **kw)
            raise AssertionError('the unreachable world was built')
        except ConfigError as e: assert 'flip_rate 0.9 cannot be reached' in str(e)
        await asyncio.sleep(0.2)  # the pool has shut down; its last callbacks reach the loop
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(grid_then_collect())
    assert unretrieved == [], unretrieved
