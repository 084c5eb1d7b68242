("Grids and sweeps on a real Ray cluster (a head and a worker node, "
 "each started by `ray start` in processes of their own) give the processes executor's results, "
 "survive the loss of a node mid-grid, and resume an interrupted grid without re-running finished jobs; "
 "without an address, Ray starts on this machine for the jobs and goes away after.")
import asyncio, contextlib, os, shutil, socket, subprocess, sys, tempfile, uuid
from pathlib import Path

import psutil
import pytest

from treetrm.bench import loop_bench
from treetrm.core import ConfigError
from treetrm.executors import run_jobs
from treetrm.bench.loop_bench import run_grid, BenchSettings, job_rows_file
from treetrm.train.sweep import sweep
from test_bench_loop import TINY, TINY_GRID, SETTINGS, UNREACHABLE, without_wall_s
from test_sweep import RUNS, CONFIG, when

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # the tiers: conftest.py

RAY = Path(sys.executable).parent/'ray'
GRID = dict(rules=('greedy', 'gate'), budget=300, seeds=(0, 1), settings=BenchSettings(**SETTINGS), verbose=False)


def free_ports(n: int) -> list[int]:
    "`n` distinct free ports (all held open while they are chosen, so none comes back twice)."
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks: s.bind(('127.0.0.1', 0))
        return [s.getsockname()[1] for s in socks]


def ray_start(*args, tmp: Path):
    "`ray start ...` with its own TMPDIR: a job's scratch folder shows which node ran it."
    tmp.mkdir(parents=True, exist_ok=True)
    env = os.environ | {'TMPDIR': str(tmp), 'RAY_USAGE_STATS_ENABLED': '0'}  # the token: see `cluster`
    out = subprocess.run([str(RAY), 'start', '--disable-usage-stats', '--num-cpus=1',
                          '--object-store-memory=100000000', *args], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def processes_with(text: str) -> list[psutil.Process]:
    "Processes whose command line mentions `text`, and everything they started."
    found = []
    for p in psutil.process_iter(['cmdline']):
        if any(text in part for part in p.info['cmdline'] or ()):
            found += [p, *p.children(recursive=True)]
    return found


def kill(procs: list[psutil.Process]):
    for p in procs:
        try: p.kill()
        except psutil.NoSuchProcess: pass
    psutil.wait_procs(procs, timeout=10)


@pytest.fixture(scope='module')
def cluster():
    "A two-node Ray cluster on this machine: (address, head scratch, worker scratch, worker node's manager port)."
    root = Path(tempfile.mkdtemp(prefix='trray', dir='/tmp'))  # short: Ray's socket paths live under it
    # token authentication with this cluster's own token, for its nodes and for this process (the driver), set before
    # this process first imports Ray (it reads its authentication settings once)
    assert 'ray' not in sys.modules, 'Ray was imported before the cluster set its token'
    (root/'token').write_text(uuid.uuid4().hex)
    auth = pytest.MonkeyPatch()
    auth.setenv('RAY_AUTH_MODE', 'token')
    auth.setenv('RAY_AUTH_TOKEN_PATH', str(root/'token'))
    port, worker_port = free_ports(2)
    ray_start('--head', f'--port={port}', f'--temp-dir={root}/ray', '--include-dashboard=false', tmp=root/'head')
    try:
        ray_start(f'--address=127.0.0.1:{port}', f'--node-manager-port={worker_port}', tmp=root/'worker')
        yield f'127.0.0.1:{port}', root/'head', root/'worker', worker_port
    finally:
        kill(processes_with(str(root)))
        shutil.rmtree(root, ignore_errors=True)
        auth.undo()


@pytest.fixture(scope='module')
def processes_json(tiny_grid_serial):
    ("The tiny grid with the processes executor (in this process, made once per test run: conftest.py): the JSON "
     "every Ray run must give.")
    assert GRID == TINY_GRID  # the grid tiny_grid_serial ran (processes=1 is run_grid's default)
    return without_wall_s(tiny_grid_serial)


def scratch_folders(tmp: Path) -> list[Path]: return list(tmp.glob('treetrm-job-*'))


def test_a_ray_grid_gives_the_processes_json(cluster, processes_json, tmp_path):
    address, head, worker, _ = cluster
    got = asyncio.run(run_grid([TINY], workdir=tmp_path, executor='ray', address=address, **GRID))
    assert without_wall_s(got) == processes_json
    assert len(list((tmp_path/'cell0').glob('rows-*.json'))) == 2  # the driver kept both jobs' rows
    assert not sys.modules['ray'].is_initialized()  # the grid disconnected from the cluster it joined


def test_losing_a_node_mid_grid_still_gives_the_same_json(cluster, processes_json, tmp_path):
    "The worker node dies while its job runs: Ray reruns that job on the head node; the JSON does not change."
    address, head, worker, worker_port = cluster
    before = set(scratch_folders(worker))

    async def grid_losing_the_worker():
        grid = asyncio.create_task(run_grid([TINY], workdir=tmp_path, executor='ray', address=address, **GRID))
        await when(lambda: set(scratch_folders(worker)) - before or grid.done())  # a job started on the worker node
        assert not grid.done()
        kill(processes_with(f'--node_manager_port={worker_port}'))  # its raylet and the workers it started
        return await grid

    got = asyncio.run(grid_losing_the_worker())
    assert without_wall_s(got) == processes_json
    assert set(scratch_folders(worker)) - before  # the killed job's scratch folder stayed: it did not finish there


def test_an_interrupted_ray_grid_resumes_without_rerunning_finished_jobs(cluster, processes_json, tmp_path,
                                                                        monkeypatch):
    "Interrupted once the first job's rows are kept: the same call again sends Ray only the unfinished job."
    address, head = cluster[0], cluster[1]
    rows = [job_rows_file(TINY, s, GRID['rules'], GRID['budget'], GRID['settings'], tmp_path/'cell0') for s in (0, 1)]
    sent, real_run_jobs = [], loop_bench.run_jobs

    def recorded(job, jobs, *args):
        sent.append(sorted(jobs))
        return real_run_jobs(job, jobs, *args)

    monkeypatch.setattr(loop_bench, 'run_jobs', recorded)

    async def interrupted():
        grid = asyncio.create_task(run_grid([TINY], workdir=tmp_path, executor='ray', address=address, **GRID))
        await when(lambda: any(r.exists() for r in rows) or grid.done())
        grid.cancel()  # what Ctrl-C in a notebook does to the cell's task
        with pytest.raises(asyncio.CancelledError): await grid

    asyncio.run(interrupted())
    (finished, ) = [r for r in rows if r.exists()]
    kept = (finished.read_bytes(), finished.stat().st_mtime_ns)
    resumed = asyncio.run(run_grid([TINY], workdir=tmp_path, executor='ray', address=address, **GRID))
    assert sent == [[(0, 0), (0, 1)], [(0, s) for s, r in zip((0, 1), rows) if r != finished]]
    assert (finished.read_bytes(), finished.stat().st_mtime_ns) == kept
    assert without_wall_s(resumed) == processes_json


def test_a_failed_ray_job_is_named_by_cell_and_seed(cluster, tmp_path):
    "A job that raises on the cluster stops the grid with its own error, its cell and world seed named; not retried."
    with pytest.raises(ConfigError) as e:
        asyncio.run(run_grid([TINY, UNREACHABLE], workdir=tmp_path, executor='ray', address=cluster[0],
                             **GRID | dict(seeds=(0, ))))
    assert 'flip_rate 0.9 cannot be reached' in str(e.value)
    assert any('grid cell 1' in n and 'world seed 0' in n for n in e.value.__notes__), e.value.__notes__


def test_asking_for_ray_without_it_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, 'ray', None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"pip install 'treetrm\[ray\]'"):
        asyncio.run(run_grid([TINY], workdir=tmp_path, executor='ray', **GRID))
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_sweep_on_the_cluster_gives_the_rows_of_this_process(cluster, serial_sweep, tmp_path):
    address = cluster[0]
    here = serial_sweep[0]  # sweep(RUNS, config=CONFIG) in this process, made once per test run (conftest.py)
    on_ray = asyncio.run(sweep(RUNS, tmp_path/'ray', config=CONFIG, executor='ray', address=address, verbose=False))
    timing = ('wall_s', 'speculative_calls')  # what timing decides (test_newcomer_loose)
    assert on_ray.drop(timing).equals(here.drop(timing))


def test_ray_on_this_machine_is_its_own_and_goes_away(cluster):
    "address=None starts a Ray of its own, even while a cluster runs here, and shuts it down after the jobs."
    async def collect(): return {k: r async for k, r in run_jobs(asyncio.sleep, {'a': (0, 2), 'b': (0, 3)},
                                                                 executor='ray', processes=1)}
    assert asyncio.run(collect()) == {'a': 2, 'b': 3}
    assert not sys.modules['ray'].is_initialized()
