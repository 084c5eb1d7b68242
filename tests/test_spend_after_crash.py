"""Spend after a crash (issue 32, item 10): every model call's `llm_calls` row is written before its request goes out,
so a process killed after the endpoint answered — and billed — a request, but before the client could record the
reply, leaves that call in harness.db as 'sent' (no reply recorded) instead of leaving no trace of it. After the
resumed runs, the calls on record are, per role, never fewer than the requests the endpoint answered.

Over HTTP: the `openai` backend against the sim server, in the subprocess and with the settings of
tests/test_crashes.py. The server itself kills the client: on the k-th request of a role in an attempt it does the
work (the request is answered, as a real endpoint would bill it), SIGKILLs the client and only then replies."""
import os, signal, sqlite3, time

import psutil, pytest

from test_crashes import RecordingServer, http_env, run_until_killed
from treetrm.log import HarnessLog
from treetrm.report import cost_table
from treetrm.sim.world import make_world

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

# attempt -> (role, k): the k-th request of that role in the attempt is answered and its client killed. The split's
# baseline (agent), its diagnosis (judge) after the first resume, training's first proposal (evolver) after the second.
KILLS = {0: ('agent', 5), 1: ('judge', 2), 2: ('evolver', 1)}
WENT_OUT = ('sent', 'ok', 'error', 'cancelled')  # the statuses of calls whose request was sent (not cache hits)


def wait_until_dead(pid:int, timeout_s:float=10.0):
    "Return once process `pid` has died (a zombie not yet reaped counts as dead)."
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE: return
        except psutil.NoSuchProcess: return
        time.sleep(0.01)
    raise AssertionError(f'process {pid} still alive {timeout_s} s after SIGKILL')


class KillingServer(RecordingServer):
    "The recording sim server; on the planned request of an attempt it answers, kills the client, then replies."
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.client_pid, self.counts, self.killed = None, {}, []

    def run_role(self, req:dict, empty:bool=False) -> tuple:
        attempt, out = self.attempt, super().run_role(req, empty)  # the work is done and recorded as answered
        role, k = KILLS.get(attempt, (None, 0))
        if out[0] != 200 or req.get('model') != f'sim-{role}': return out
        with self._lock:
            n = self.counts[attempt] = self.counts.get(attempt, 0) + 1
        if n == k:
            self.killed.append((attempt, role))
            os.kill(self.client_pid, signal.SIGKILL)
            wait_until_dead(self.client_pid)  # the reply below reaches no one
        return out


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('spend')/'world', seed=2, n_videos=8)


def answered_by_role(srv:KillingServer) -> dict:
    "role -> requests the server answered, over every attempt."
    out = {}
    for _, model, _ in srv.answered: out[model.removeprefix('sim-')] = out.get(model.removeprefix('sim-'), 0) + 1
    return out


def test_calls_answered_before_a_kill_stay_on_record(world, tmp_path):
    ws = tmp_path/'ws'
    with KillingServer(world_dir=world, seed=0) as srv:
        def started(proc): srv.client_pid = proc.pid
        for attempt in range(len(KILLS) + 1):
            srv.attempt = attempt
            code, marks = run_until_killed(ws, world, backend='openai', env=http_env(srv), on_start=started)
            if attempt < len(KILLS): assert code == -signal.SIGKILL, f'attempt {attempt} was not killed: {marks}'
        assert code == 0 and marks[-1][0] == 'done', marks
        answered = answered_by_role(srv)
    assert srv.killed == [(a, role) for a, (role, _) in KILLS.items()]
    conn = sqlite3.connect(ws/'harness.db')
    try:
        went_out = dict(conn.execute(f'SELECT role, count(*) FROM llm_calls WHERE status IN {WENT_OUT} '
                                     'GROUP BY role').fetchall())
    finally: conn.close()
    print(f'\n[spend after a crash] answered by the server {answered}, calls sent on record {went_out}')
    # every request the endpoint answered (and would bill) is a call on record: answered ones, and the killed ones
    assert all(went_out.get(role, 0) >= n for role, n in answered.items()), (went_out, answered)
    with HarnessLog(ws/'harness.db', readonly=True) as log: cost = cost_table(log)
    sent = dict(cost.select('role', 'sent').iter_rows())
    # each call killed in flight shows in the cost report as sent with no reply recorded
    assert all(sent.get(role, 0) >= 1 for role, _ in KILLS.values()), cost
    assert sent['ALL'] >= len(KILLS), cost
    assert (cost['calls'] >= cost['sent'] + cost['cancelled'] + cost['errors']).all(), cost
