"""Test tiers and shared setup.

Markers (registered in pytest.ini, which passes `--strict-markers`): `slow` (a test, or the module setup it pays for,
that costs about 5 s or more on 2 cores), `ray` (starts Ray), `real_model` (the llama.cpp tier) and `notebooks` (runs a
notebook through papermill). Each test file marks what it pays for, with `pytestmark` or on the test.

- fast tier, before each commit (every module is imported: test_old_names, test_hygiene):
  `pytest -q tests -m "not slow and not ray and not real_model"`
- full tier, as CI runs it (.ci/run): `pytest -q tests -n 2 --dist loadgroup`

Under `--dist loadgroup` (pytest-xdist; the scheduler below) each file runs whole on one worker, so module-scoped
fixtures are made once, and the files that share the session fixtures below (the tiny loop-benchmark grid and the
serial sweep) or start Ray run on one worker, one after another: their session fixtures are made once per run, and two
Rays never start side by side on this machine (Ray's fixed default ports). Session fixtures hand out results that
tests only read; a test that writes copies a fixture's folder into its own tmp_path first.
"""
import asyncio, os

import pytest

# Ray runs its workers at niceness 15 by default: beside two busy loops (the CI check on a busy machine) they got about
# 5% of a core and a grid's first job took most of the tests' 20-minute wait. The Rays these tests start (`ray start`
# subprocesses and `ray.init` here inherit the environment) run their workers at the tests' own priority.
os.environ.setdefault('RAY_worker_niceness', '0')

# files that run on one xdist worker together: they read the same session fixtures, or they start Ray
SHARED_WORKER = {'test_bench_loop.py': 'grid', 'test_sweep.py': 'grid', 'test_ray.py': 'grid',
                 'test_bench_scale.py': 'grid'}


def pytest_xdist_make_scheduler(config, log):
    ("Under `--dist loadgroup`: one work unit per test file, the files of SHARED_WORKER in one unit together. A "
     "scheduler of its own because pytest-xdist 3.8 groups by `xdist_group` marks by rewriting `item._nodeid`, which "
     "pytest 9 no longer reads: there the marks are ignored and every test is sent on its own, module fixtures made "
     "again on each worker (measured: test_alpha_shipped's null runs four times instead of twice).")
    if config.getoption('dist') != 'loadgroup': return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split('::', 1)[0]
            return SHARED_WORKER.get(file.rsplit('/', 1)[-1], file)

    return FileGroups(config, log)


@pytest.fixture(scope='session')
def tiny_grid_serial(tmp_path_factory):
    ("The loop benchmark's tiny grid (rules greedy and gate, budget 300, world seeds 0 and 1) in this process: the "
     "serial summary that test_bench_loop compares worker processes with and test_ray compares every Ray run with.")
    from treetrm.bench.loop_bench import run_grid, BenchSettings
    from test_bench_loop import TINY, SETTINGS
    kw = dict(rules=('greedy', 'gate'), budget=300, seeds=(0, 1), settings=BenchSettings(**SETTINGS), verbose=False)
    return asyncio.run(run_grid([TINY], processes=1, workdir=tmp_path_factory.mktemp('tiny_grid'), **kw))


@pytest.fixture(scope='session')
def serial_sweep(tmp_path_factory):
    ("test_sweep's two-run sweep in this process: (its frame, its work folder); test_sweep checks the folder and "
     "compares worker processes and a resumed sweep with the frame, test_ray compares a sweep on the cluster with it.")
    from treetrm.train.sweep import sweep
    from test_sweep import RUNS, CONFIG
    work = tmp_path_factory.mktemp('serial_sweep')
    return asyncio.run(sweep(RUNS, work, config=CONFIG, verbose=False)), work


@pytest.fixture(scope='session')
def docs_build():
    "docs/build.py, the docs site's build script, as a module (it is a script, not part of the package)."
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location('docs_build', Path(__file__).resolve().parents[1]/'docs'/'build.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
