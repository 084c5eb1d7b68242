("The loop benchmark notebook runs under papermill with a tiny grid; its JSON has loop.json's shape; gains, "
 "intervals and regret are the planted truth of the delivered files; a rule that accepts nothing gains 0; "
 "an interrupted grid resumes; worker processes give the serial numbers.")
import asyncio, contextlib, gc, json, math, sqlite3
from pathlib import Path

import papermill as pm
import pytest

from treetrm.bench import loop_bench
from treetrm.train.acceptance import Acceptance
from treetrm.core import ConfigError, project_root
from treetrm.bench.loop_bench import run_grid, BenchSettings, DEFAULT_GRID_SPLIT, GRID_TYPES
from treetrm.bench.scale import without_timings
from treetrm.sim.world import true_accuracy, world_questions

ROOT = project_root()
NB = ROOT/'nbs'/'bench'/'loop.ipynb'
RULES = ['gate', 'gepa', 'gepa_veto', 'greedy', 'greedy_margin', 'fixed_n', 'bayes', 'oracle']
TINY = dict(profile='realistic', n_videos=16, questions_per_video=GRID_TYPES)
SETTINGS = dict(min_ladder_units=4, batch_size=8, split=dict(DEFAULT_GRID_SPLIT, val_wrong_min=2))
UNREACHABLE = dict(TINY, realism=dict(flip_rate=0.9))   # the realism model refuses it (reachable: about 0.14 to 0.36)
# the tiny grid that worker processes (below) and every Ray run (test_ray.py) must give the serial numbers of; its
# serial run is made once per test run: conftest.py's tiny_grid_serial
TINY_GRID = dict(rules=('greedy', 'gate'), budget=300, seeds=(0, 1), settings=BenchSettings(**SETTINGS), verbose=False)
T_975_1 = 12.706204736  # t(0.975, 1 df) from the tables: the 95% interval's factor over two world seeds


def world_workspace(workdir, seed: int) -> Path:
    "The folder of world seed `seed` of the grid's only cell: its world/ and workspace/."
    (d, ) = (Path(workdir)/'cell0').glob(f'w{seed}-*')
    return d


def pool_test_questions(ws: Path) -> list:
    "The test pool's questions, read from the workspace's pools.json and the world's questions (not `runner.pool`)."
    videos = set(json.loads((ws/'workspace'/'pools'/'pools.json').read_text())['pools']['test']['videos'])
    return [q for q in world_questions(ws/'world').values() if q.video_id in videos]


def seed_and_delivered(ws: Path, rule: str) -> tuple[str, str]:
    "(seed skills version, the version the manifest records run bench-`rule` delivering)."
    history = json.loads((ws/'workspace'/'manifest.json').read_text())['history']
    seed = next(h['version'] for h in history if h['event'] == 'seed_skills')
    (delivered, ) = [h['version'] for h in history if h['event'].startswith('deliver_') and h['run'] == f'bench-{rule}']
    return seed, delivered


def true_gain(ws: Path, rule: str) -> float:
    "Points the delivered skills' exact test accuracy is above the seed skills' (`sim.true_accuracy` on the folders)."
    seed, delivered = seed_and_delivered(ws, rule)
    test, skills = pool_test_questions(ws), ws/'workspace'/'skills'
    return 100 * (true_accuracy(ws/'world', skills/delivered, test) - true_accuracy(ws/'world', skills/seed, test))


def population_gain(ws: Path, rule: str) -> float:
    "Points the delivered skills' exact accuracy is above the seed's on every question of the world (the oracle's)."
    seed, delivered = seed_and_delivered(ws, rule)
    qs, skills = list(world_questions(ws/'world').values()), ws/'workspace'/'skills'
    return 100 * (true_accuracy(ws/'world', skills/delivered, qs) - true_accuracy(ws/'world', skills/seed, qs))


without_wall_s = without_timings  # a summary without its timings (the only part that differs between equal grids)


async def accept_nothing(runner, req) -> dict:
    "A stand-in rule whose delivery is known: it rejects every candidate, so the seed skills are delivered."
    return {t: Acceptance(t, 'reject_inertia') for t in req.candidates}


@contextlib.contextmanager
def with_accept_nothing():
    "`accept_nothing` as the benchmark rule 'accept_nothing' (a ceiling: a function of the world), for this block only."
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(loop_bench.CEILINGS, 'accept_nothing', lambda world_dir: accept_nothing)
        mp.setitem(loop_bench.RULE_DESCRIPTIONS, 'accept_nothing', 'rejects every candidate (a test stand-in)')
        yield


# Two world seeds so intervals have a width; on seed 2 greedy validation moves the skills by points at this budget
# (on seed 0 it gains nothing); the curve stops at 1x, so the reported gain is where each run ended.
# accept_nothing runs last, on a workspace where the others have already moved the skills.
SCORED = dict(rules=('greedy', 'oracle', 'accept_nothing'), budget=300, seeds=(0, 2), processes=1, verbose=False,
              settings=BenchSettings(curve=(1.0, ), **SETTINGS))


@pytest.fixture(scope='module')
def scored_grid(tmp_path_factory):
    "An uninterrupted grid of SCORED: (summary, workdir)."
    work = tmp_path_factory.mktemp('scored')
    with with_accept_nothing(): summary = asyncio.run(run_grid([TINY], workdir=work, **SCORED))
    return summary, work


def test_notebook_is_committed_clean():
    nb = json.loads(NB.read_text())
    assert nb['cells'][0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(nb['cells'][0]['source'])
    assert sum('parameters' in c.get('metadata', {}).get('tags', []) for c in nb['cells']) == 1
    assert all(not c.get('outputs') and not c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code')
    assert not any('asyncio.run' in ''.join(c['source']) for c in nb['cells'])


@pytest.mark.notebooks
@pytest.mark.slow
def test_loop_bench_notebook(tmp_path):
    out, work = tmp_path/'bench'/'loop.json', tmp_path/'work'
    pm.execute_notebook(str(NB), str(tmp_path/'loop_out.ipynb'), kernel_name='python3', cwd=str(ROOT),
                        progress_bar=False, parameters=dict(worlds=[TINY], rules=RULES, seeds=[0], budget=400,
                                                            processes=1, workdir=str(work), out=str(out),
                                        min_ladder_units=4, batch_size=8, split=SETTINGS['split']))
    s = json.loads(out.read_text())
    assert set(s) >= {'cells', 'wall_s', 'figures', 'bar'} and len(s['cells']) == 1 and list(s['bar']) == ['gate']
    c = s['cells'][0]
    assert ({k: c['world'][k] for k in TINY} == json.loads(json.dumps(TINY)) and c['budget'] == 400
            and c['seeds'] == [0] and set(c['rules']) == set(RULES))
    for f in s['figures']: assert (out.parent/f).stat().st_size > 5_000
    assert {f.split('.')[0] for f in s['figures']} == {'loop_frontier', 'loop_budget', 'loop_pooled'}
    assert {(r['units'], r['rule']) for r in s['pooled']} == {('16 videos', r) for r in RULES}
    assert all(r['gain'] == c['rules'][r['rule']]['gain']['mean'] for r in s['pooled'])  # one cell: the cell's mean
    for rule, v in c['rules'].items():
        assert set(v) >= {'gain', 'p_worse_than_seed', 'harmful_points', 'regret', 'calls', 'runs'}
        # the hard budget holds
        assert set(v['calls']) == {'agent', 'judge', 'evolver'} and sum(v['calls'].values()) <= 400
        (run,) = v['runs']
        assert run['seed'] == 0 and run['worse_than_seed'] == (run['gain'] < -1e-9) and v['gain']['mean'] == run['gain']
        assert (abs(v['regret'] - (c['rules']['oracle']['gain']['mean'] - run['gain'])) < 1e-9 and len(v['regret_ci'])
                == 2)
    # the curve's 2x point is where each run ended (it trains to 2x the budget): the truth of the version the
    # workspace's manifest says the run delivered, recomputed from the skills folders
    ws = world_workspace(work, 0)
    truth = {rule: true_gain(ws, rule) for rule in RULES}
    for rule, v in c['rules'].items(): assert abs(v['gain_by_budget']['2'] - truth[rule]) < 1e-9, (rule, v, truth)
    moved = [r for r in RULES if len(set(seed_and_delivered(ws, r))) == 2 and abs(truth[r]) > 0.1]
    assert {'greedy', 'oracle'} <= set(moved), truth  # the check covers runs that changed the skills


@pytest.mark.slow
def test_processes_give_the_serial_numbers(tiny_grid_serial, tmp_path):
    kw = TINY_GRID
    serial = tiny_grid_serial  # run_grid([TINY], processes=1, **kw), made once (conftest.py)
    parallel = asyncio.run(run_grid([TINY], processes=2, workdir=tmp_path/'b', **kw))
    strip = lambda s: [{r: {k: x for k, x in v.items() if k not in ('runs', 'wall_s')}
                        | {'runs': [{k: x for k, x in run.items() if k != 'wall_s'} for run in v['runs']]}
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


@pytest.mark.slow
def test_each_gain_is_the_truth_of_the_files_the_run_delivered(scored_grid):
    "Per rule and world seed, the reported gain is the exact test gain of the version the workspace says was delivered."
    summary, work = scored_grid
    rules = summary['cells'][0]['rules']
    for seed in SCORED['seeds']:
        ws = world_workspace(work, seed)
        for rule in SCORED['rules']:
            (run, ) = [r for r in rules[rule]['runs'] if r['seed'] == seed]
            assert abs(run['gain'] - true_gain(ws, rule)) < 1e-9, (seed, rule, run['gain'], true_gain(ws, rule))
            assert run['worse_than_seed'] == (true_gain(ws, rule) < -1e-9)
            assert run['worse_by_half'] == (true_gain(ws, rule) < -0.5)  # the primary harm measure
            assert abs(run['population_gain'] - population_gain(ws, rule)) < 1e-9, (seed, rule)
    changed = {(r, s) for r in ('greedy', 'oracle') for s in SCORED['seeds']
               if len(set(seed_and_delivered(world_workspace(work, s), r))) == 2
               and abs(true_gain(world_workspace(work, s), r)) > 1.0}
    assert {('greedy', 2), ('oracle', 0), ('oracle', 2)} <= changed, changed  # the comparison is not 0 == 0


def two_seed_interval(a: float, b: float) -> list[float]:
    "The 95% t interval of two values by hand: sd = |a - b| / sqrt(2), so half-width = t(0.975, 1) * |a - b| / 2."
    return [(a + b) / 2 - T_975_1 * abs(a - b) / 2, (a + b) / 2 + T_975_1 * abs(a - b) / 2]


def close(xs, ys) -> bool: return len(xs) == len(ys) and all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(xs, ys))


@pytest.mark.slow
def test_intervals_and_regret_over_two_seeds_come_from_the_per_seed_truth(scored_grid):
    "Mean, 95% t interval (1 df) and regret of every rule, recomputed from the truth of each seed's delivery."
    summary, work = scored_grid
    rules = summary['cells'][0]['rules']
    truth = {r: [true_gain(world_workspace(work, s), r) for s in SCORED['seeds']] for r in SCORED['rules']}
    assert abs(truth['oracle'][0] - truth['oracle'][1]) > 1.0, truth  # the seeds differ: the interval has a width
    for rule, (a, b) in truth.items():
        got, regret = rules[rule]['gain'], [truth['oracle'][0] - a, truth['oracle'][1] - b]
        assert close([got['mean']], [(a + b) / 2]) and close(got['ci'], two_seed_interval(a, b)), (rule, got, truth)
        assert close([rules[rule]['regret']], [sum(regret) / 2]), (rule, rules[rule]['regret'], regret)
        assert close(rules[rule]['regret_ci'], two_seed_interval(*regret)), (rule, rules[rule]['regret_ci'], regret)
        assert rules[rule]['p_worse_than_seed'] == sum(g < -1e-9 for g in (a, b)) / 2


@pytest.mark.slow
def test_a_rule_that_accepts_nothing_delivers_exactly_the_seed(scored_grid):
    "A rule rejecting every candidate, run after rules that moved the skills, delivers the seed: +0.00 exactly."
    summary, work = scored_grid
    v = summary['cells'][0]['rules']['accept_nothing']
    assert v['gain'] == dict(mean=0.0, ci=[0.0, 0.0]) and [r['gain'] for r in v['runs']] == [0.0, 0.0]
    assert v['gain_by_budget'] == {'1': 0.0} and v['p_worse_than_seed'] == 0.0
    for seed in SCORED['seeds']:
        ws = world_workspace(work, seed)
        seed_version, delivered = seed_and_delivered(ws, 'accept_nothing')
        assert delivered == seed_version, (seed, delivered)
        assert seed_and_delivered(ws, 'oracle')[1] != seed_version  # the workspace's skills had moved before it ran
    gated = sum(b['gated'] for b in v['acceptance_by_effect'].values())
    assert gated > 0 and all(b['delivered'] == 0 for b in v['acceptance_by_effect'].values())  # it judged edits
    assert v['calls']['evolver'] > 0  # it trained: edits were proposed and rejected


def llm_calls(ws: Path) -> int:
    "Model calls stored in a world's workspace."
    with contextlib.closing(sqlite3.connect(ws/'workspace'/'harness.db')) as db:
        return db.execute('SELECT COUNT(*) FROM llm_calls').fetchone()[0]


@pytest.mark.slow
def test_an_interrupted_grid_resumes_from_its_workdir(scored_grid, tmp_path, monkeypatch):
    "Ctrl-C inside seed 2's job; the same call again re-runs only that job, from a clean workspace, to the same JSON."
    real_run_world, ran = loop_bench.run_world, []

    async def interrupted(spec, seed, rules, *args):
        if seed != 2: return await real_run_world(spec, seed, rules, *args)
        await real_run_world(spec, seed, rules[:2], *args)  # greedy and oracle finish in seed 2's workspace, then
        raise KeyboardInterrupt  # the user interrupts before accept_nothing and before the job's rows are written

    async def counted(spec, seed, *args):
        ran.append(seed)
        return await real_run_world(spec, seed, *args)

    with with_accept_nothing():
        monkeypatch.setattr(loop_bench, 'run_world', interrupted)
        with pytest.raises(KeyboardInterrupt): asyncio.run(run_grid([TINY], workdir=tmp_path, **SCORED))
        (done, ) = (tmp_path/'cell0').glob('rows-*.json')  # seed 0's job finished; seed 2's left a workspace only
        assert (world_workspace(tmp_path, 2)/'workspace'/'runs'/'bench-oracle'/'metrics.json').exists()
        kept, calls_0 = done.read_bytes(), llm_calls(world_workspace(tmp_path, 0))
        monkeypatch.setattr(loop_bench, 'run_world', counted)
        resumed = asyncio.run(run_grid([TINY], workdir=tmp_path, **SCORED))
    assert ran == [2]  # seed 0's rows were read back, not re-run
    assert done.read_bytes() == kept
    assert llm_calls(world_workspace(tmp_path, 0)) == calls_0  # no model call was made on seed 0's world again
    assert len(list((tmp_path/'cell0').glob('rows-*.json'))) == 2
    # the same JSON as the uninterrupted grid: seed 2's finished greedy and oracle runs were not taken as done
    assert without_wall_s(resumed) == without_wall_s(scored_grid[0])
