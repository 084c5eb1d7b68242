("A Ray started on this machine that times out on every try (a busy machine) ends in a ConfigError that names the "
 "fix, with nothing of the failed starts left running; no real Ray: a stand-in `ray` module whose start times out.")
import asyncio, subprocess, sys, time, types

import psutil
import pytest

from treetrm.core import ConfigError
from treetrm.executors import RAY_START_TRIES, run_jobs

TIMED_OUT = ('The current node timed out during startup. This could happen because some of the raylet failed to '
             'startup or the GCS has become overloaded.')  # Ray 2.60's words (ray/_private/node.py)


def running(pid: int) -> bool:
    "Whether `pid` is a live process (a killed one waiting to be reaped is not)."
    try: return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess: return False


def still_running(pids: list[int], within: float = 10) -> list[int]:
    "Those of `pids` still running after `within` seconds (a SIGKILL takes effect when the process is next scheduled)."
    deadline = time.monotonic() + within
    while (left := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline: time.sleep(0.05)
    return left


class TimingOutRay:
    "A stand-in `ray` whose every start leaves a raylet (a `sh`) and its agent (a `sleep`) behind, then times out."
    def __init__(self):
        self.started, self.inits, self.shutdowns = [], [], 0

    def is_initialized(self): return False

    def init(self, **kw):
        self.inits.append(kw)
        raylet = subprocess.Popen(['sh', '-c', 'sleep 600 & echo $!; wait'], stdout=subprocess.PIPE, text=True)
        self.started += [raylet.pid, int(raylet.stdout.readline())]  # the raylet and its agent
        raise Exception(TIMED_OUT)

    def shutdown(self): self.shutdowns += 1


async def _nothing(): return None


async def _run_on_local_ray(jobs: dict):
    return {k: r async for k, r in run_jobs(_nothing, jobs, executor='ray', processes=2)}


@pytest.fixture
def timing_out_ray(monkeypatch):
    "The stand-in, imported as `ray`; whatever it started is killed after the test, passed or failed."
    ray = TimingOutRay()
    monkeypatch.setitem(sys.modules, 'ray', types.SimpleNamespace(
        is_initialized=ray.is_initialized, init=ray.init, shutdown=ray.shutdown))
    yield ray
    for pid in ray.started:
        if running(pid): psutil.Process(pid).kill()


def test_a_local_ray_that_never_starts_names_the_fix_and_leaves_nothing_running(timing_out_ray):
    older = subprocess.Popen(['sleep', '600'])  # a child this process had before Ray: not Ray's to end
    try:
        with pytest.raises(ConfigError) as e: asyncio.run(_run_on_local_ray({'a': ()}))
        assert older.poll() is None, 'a process started before Ray was killed with the failed starts'
    finally: older.kill()
    message = str(e.value)
    assert f'{RAY_START_TRIES} starts in a row timed out' in message
    assert 'ray start --head --num-cpus=2' in message and "address='auto'" in message  # the fix, with its CPUs
    assert "executor='processes'" in message
    assert 'timed out during startup' in str(e.value.__cause__)  # Ray's own words stay attached
    assert len(timing_out_ray.inits) == RAY_START_TRIES
    assert all(kw['address'] == 'local' and kw['num_cpus'] == 2 for kw in timing_out_ray.inits)
    assert len(timing_out_ray.started) == 2 * RAY_START_TRIES
    assert still_running(timing_out_ray.started) == []  # the raylets and their agents, every try's
    assert timing_out_ray.shutdowns == RAY_START_TRIES  # Ray reset in this process after each failed start
