("A sweep of training runs from one split gives the same rows in this process and in worker processes; "
 "an interrupted sweep resumes without re-running finished runs; a run trains in its own copy of the base workspace.")
import asyncio, json
from pathlib import Path

import pytest

from treetrm.train import sweep as sweep_module
from treetrm.core import ConfigError
from treetrm.train.sweep import sweep, sweep_grid

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

CONFIG = dict(epochs=1, max_calls=400, min_ladder_units=4)
RUNS = sweep_grid(seed=[0, 1], harm_risk=[0.05])  # two runs: the seeds differ, the harm bar is shared


def rows(frame): return frame.drop('wall_s', 'speculative_calls')  # what timing decides (test_newcomer_loose)


@pytest.fixture(scope='module')
def serial(serial_sweep):
    "sweep(RUNS, work, config=CONFIG) in this process: (frame, work), made once per test run (conftest.py), read only."
    return serial_sweep


def test_each_run_trains_in_its_own_copy_of_one_split(serial):
    frame, work = serial
    assert frame['run'].to_list() == list(RUNS) and frame['seed_accuracy'].n_unique() == 1  # one baseline for all
    pools = ({p.read_bytes() for p in (work/'runs').glob('*/pools/pools.json')}
             | {(work/'base'/'pools'/'pools.json').read_bytes()})
    assert len(pools) == 1  # every copy holds the base's frozen pools
    for name in RUNS:  # each workspace holds its run and no other
        assert sorted(p.name for p in (work/'runs'/name/'runs').iterdir() if p.is_dir()) == [name]
    assert not (work/'base'/'runs').exists() or not any((work/'base'/'runs').iterdir())  # the base only split
    assert frame['calls'].min() > 0 and (frame['test_n'] > 0).all()
    assert frame['w'].to_list() != frame['l'].to_list() or frame['delta'].n_unique() > 1  # the seeds made two runs
    saved = json.loads((work/'sweep.json').read_text())['runs']
    assert [r['run'] for r in saved] == list(RUNS) and saved[0]['settings'] == {'harm_risk': 0.05, 'seed': 0}


def test_worker_processes_give_the_serial_rows(serial, tmp_path):
    assert rows(asyncio.run(sweep(RUNS, tmp_path, config=CONFIG, processes=2, verbose=False))).equals(rows(serial[0]))


async def when(condition, timeout: float = 1200):
    "Wait until `condition()` holds (a guard against a hang, not a speed claim)."
    t0 = asyncio.get_running_loop().time()
    while not condition():
        assert asyncio.get_running_loop().time() - t0 < timeout, 'timed out'
        await asyncio.sleep(0.05)


def test_an_interrupted_sweep_resumes_without_rerunning_finished_runs(serial, tmp_path, monkeypatch):
    sent, real = [], sweep_module.run_jobs

    def recorded(job, jobs, *args):
        sent.append(sorted(jobs))
        return real(job, jobs, *args)

    monkeypatch.setattr(sweep_module, 'run_jobs', recorded)
    done = [tmp_path/'rows'/f'{name}.json' for name in RUNS]

    async def interrupted():
        task = asyncio.create_task(sweep(RUNS, tmp_path, config=CONFIG, verbose=False))
        await when(lambda: any(d.exists() for d in done) or task.done())
        task.cancel()
        with pytest.raises(asyncio.CancelledError): await task

    asyncio.run(interrupted())
    (finished, ) = [d for d in done if d.exists()]
    kept = (finished.read_bytes(), finished.stat().st_mtime_ns)
    again = asyncio.run(sweep(RUNS, tmp_path, config=CONFIG, verbose=False))
    assert sent == [list(RUNS), [d.stem for d in done if d != finished]]
    assert (finished.read_bytes(), finished.stat().st_mtime_ns) == kept
    assert rows(again).equals(rows(serial[0]))


def test_a_setting_training_does_not_take_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match=r"run 'b' sets \['batch_sise'\]"):
        asyncio.run(sweep({'a': {}, 'b': {'batch_sise': 8}}, tmp_path/'w', config=CONFIG))
    assert not (tmp_path/'w').exists()
