"""Soak: 2,000 questions at concurrency 64 through `OpenAIProvider` against the HTTP sim with latency jitter.
Every question is answered once, memory stays bounded, and no slot, connection, thread or file descriptor is leaked.
Throughput against the ideal C / (L x calls per question) is printed for the record, not asserted: speed belongs
to the benchmarks (nbs/bench/), and this test must pass on a machine whose cores are busy with other work."""
import asyncio, json, os, resource, socket, subprocess, sys, threading, time
from pathlib import Path

import psutil
import pytest

from treetrm.core import project_root
from treetrm.data import load_questions
from treetrm.agent.inference import run_inference
from treetrm.llm.resilience import endpoint_slots
from treetrm.llm.client import OpenAIProvider
from treetrm.llm.config import RoleConfig
from treetrm.log import HarnessLog
from treetrm.sim.generator import QUESTIONS_PER_VIDEO
from treetrm.sim.world import make_world

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

N, C = 2000, 64
LATENCY_S, JITTER_S = 0.75, 0.6  # per call: uniform in [L - J, L + J], mean L
# The HTTP path costs the harness 4.5-6 ms of CPU per call (the openai SDK's request building and reply parsing,
# the agent loop, the per-question SQLite write), all on one core because of the GIL. The ideal assumes a
# latency-bound run: at C / L ~ 85 calls/s the client is ~40% busy. (At C / L ~ 180 calls/s it is ~80% busy and
# queueing behind the busy event loop costs 15-25% of the throughput; measured.) The wide jitter keeps the 64
# conversations from moving in lock-step waves. One tool step per question (2 model calls: the step and the
# forced answer) keeps 2,000 questions under a minute.
MAX_STEPS = 1
RSS_LIMIT_MB = 1024

# The sim server with per-request latency jitter, in its own process so that its CPU does not share the
# harness's GIL (a served model is another process too).
SERVER = '''
import random, sys, threading
from treetrm.sim.server import SimServer
class JitterServer(SimServer):
    "SimServer whose latency is drawn per request, uniform in [mean - jitter, mean + jitter]."
    rng, lock = random.Random(0), threading.Lock()
    @property
    def latency_s(self):
        with self.lock: return self.mean_s + self.rng.uniform(-self.jitter_s, self.jitter_s)
    @latency_s.setter
    def latency_s(self, v): self.mean_s = v
port, world, mean, jitter = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
JitterServer.jitter_s = jitter
srv = JitterServer('127.0.0.1', port, world_dir=world, latency_s=mean)
print(srv.base_url, flush=True)
sys.stdin.read()  # serve until the test closes our stdin
srv.close()
'''

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

@pytest.fixture
def jitter_server(tmp_path):
    n_videos = -(-N // sum(QUESTIONS_PER_VIDEO.values()))
    world = make_world(tmp_path/'world', seed=3, n_videos=n_videos)
    port = free_port()
    proc = subprocess.Popen([sys.executable, '-c', SERVER, str(port), str(world), str(LATENCY_S), str(JITTER_S)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=project_root())
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url == f'http://127.0.0.1:{port}/v1', base_url
        yield world, base_url, psutil.Process(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(10)

def tcp_to(port:int, pid:int|None=None) -> int:
    "Open TCP connections of this process (or `pid`) to or from `port`."
    conns = psutil.Process(pid).net_connections(kind='tcp') if pid else psutil.Process().net_connections(kind='tcp')
    return sum(1 for c in conns if c.status != psutil.CONN_LISTEN
               and port in {c.laddr.port, getattr(c.raddr, 'port', None)})

class RssSampler:
    "Samples this process's RSS every `every_s` seconds in a thread."
    def __init__(self, every_s:float=0.25): self.every_s, self.samples, self._stop = every_s, [], threading.Event()
    def run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), me.memory_info().rss))
            self._stop.wait(self.every_s)
    def __enter__(self):
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self
    def __exit__(self, *exc):
        self._stop.set()
        self.t.join()

async def soak(questions, world, base_url, log, tmp_path):
    cfg = RoleConfig('sim-agent', base_url, api_key='sk-soak-0123456789', timeout_s=10, max_retries=2,
                     backoff_base_s=0.05, concurrency=C)
    p = OpenAIProvider(cfg)
    try:
        t0 = time.perf_counter()
        res = await run_inference(questions, trees_dir=world/'trees', provider=p, log=log, run_id='soak',
                                  skills_dir=project_root()/'prompts'/'skills', concurrency=C, max_steps=MAX_STEPS,
                                  progress=False)
        wall = time.perf_counter() - t0
        # every endpoint slot is free again: all C can be taken without waiting
        slots = endpoint_slots(base_url, C)
        for _ in range(C): await asyncio.wait_for(slots.acquire(), 0.1)
        for _ in range(C): slots.release()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    finally: await p.aclose()
    return res, wall, pending

def test_soak_2000_questions_at_concurrency_64(jitter_server, tmp_path):
    world, base_url, server = jitter_server
    questions = load_questions(world/'questions.jsonl')[:N]
    assert len(questions) == N
    port, me = int(base_url.split(':')[2].split('/')[0]), psutil.Process()
    log = HarnessLog(tmp_path/'harness.db')
    fds0, threads0, server_threads0 = me.num_fds(), threading.active_count(), server.num_threads()
    names0 = {t.name for t in threading.enumerate()}
    c0, s0 = time.process_time(), server.cpu_times()
    with RssSampler() as rss: res, wall, pending = asyncio.run(soak(questions, world, base_url, log, tmp_path))
    cpu, s1 = time.process_time() - c0, server.cpu_times()
    server_cpu = s1.user + s1.system - s0.user - s0.system
    # let the server's handler threads finish their last close: poll (a loaded machine is slow), do not guess a delay
    deadline = time.monotonic() + 30
    while True:
        fds1, threads1, server_threads1 = me.num_fds(), threading.active_count(), server.num_threads()
        names1 = {t.name for t in threading.enumerate()}  # tqdm starts one monitor thread per process, once
        open_client, open_server = tcp_to(port), tcp_to(port, server.pid)
        if ((open_client, open_server) == (0, 0) and server_threads1 <= server_threads0 + 1 and fds1 <= fds0 + 2
            or time.monotonic() > deadline):
            break
        time.sleep(0.1)
    calls = sum(len(json.loads(s)) for s in log.predictions('soak')['steps_json'])
    integrity = log.query('PRAGMA integrity_check').item()
    log.close()
    # every question answered once, none lost to the load
    assert res.n == N and res.n_new == N and res.infra_count == 0, res.stop_reason_counts
    assert integrity == 'ok'
    # no leak: tasks, slots (checked inside the run), connections, threads, file descriptors
    assert pending == []
    assert open_client == 0 and open_server == 0, (open_client, open_server)
    assert (threads1 - ('tqdm_monitor' in names1) == threads0 - ('tqdm_monitor' in names0) and server_threads1
            <= server_threads0 + 1), (threads0, threads1, server_threads0, server_threads1)
    assert fds1 <= fds0 + 2, (fds0, fds1)
    # memory is bounded: a modest peak, and no growth from the first half of the run to the second
    mb = [r / 2**20 for _, r in rss.samples]
    quarter = len(mb) // 4
    first, last, peak = max(mb[quarter:2*quarter]), max(mb[3*quarter:]), max(mb)
    assert peak < RSS_LIMIT_MB and last < first + 64, (first, last, peak)
    # throughput, for the record only (no bound: it depends on how busy the machine is)
    per_q = calls / N
    ideal = C / (LATENCY_S * per_q)
    ratio = (N / wall) / ideal
    print(f'\n[soak] N={N} C={C} L={LATENCY_S}±{JITTER_S}s calls/q={per_q:.2f} wall={wall:.1f}s q/s={N/wall:.1f} '
          f'ideal={ideal:.1f} '
          f'ratio={ratio:.3f} peak_rss={peak:.0f}MB (2nd quarter {first:.0f}MB, last quarter {last:.0f}MB, '
          f'ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f}MB) '
          f'fds {fds0}->{fds1} threads {threads0}->{threads1} '
          f'server threads {server_threads0}->{server_threads1} harness cpu/call={1000*cpu/calls:.1f}ms server '
          f'cpu/call={1000*server_cpu/calls:.1f}ms')
