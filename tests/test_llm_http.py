"The `openai` backend over real HTTP against the sim server: clean runs, injected faults, the breaker, the cache."
import asyncio, time
from collections import Counter
from dataclasses import replace

import pytest

from treetrm.core import InfraError
from treetrm.llm.costs import TELEMETRY_KEYS
from treetrm.llm.resilience import ResponseCache
from treetrm.llm.client import OpenAIProvider
from treetrm.llm.config import RoleConfig
from treetrm.sim import server as sim_server
from treetrm.log import HarnessLog

FAKE_KEY = 'sk-test-not-a-real-key-0123456789'  # must never show in rows or errors
# concurrency 4: the sim server keeps socketserver's listen backlog of 5, so more simultaneous connects get dropped
# and retried by the kernel after 1 s -- an attempt that times out without the server ever counting it
FAST = dict(timeout_s=5.0, max_retries=6, backoff_base_s=0.02, backoff_max_s=0.1, concurrency=4)
WHOLE_TEST_S = 120  # a hang guard, not a speed limit: a hung call fails the test instead of hanging it

def config(server, **kw) -> RoleConfig:
    return RoleConfig('sim-echo', server.base_url, api_key=FAKE_KEY, role='agent', **{**FAST, **kw})

def messages(i:int) -> list[dict]:
    return [{'role': 'system', 'content': 'transport test'}, {'role': 'user', 'content': f'question number {i}'}]

async def run_calls(provider, n:int) -> list:
    "Run n calls concurrently; each result is the reply text or the InfraError it raised."
    async def one(i):
        try: return (await provider.chat(messages(i), seed=i)).content
        except InfraError as e: return e
    try: return await asyncio.wait_for(asyncio.gather(*[one(i) for i in range(n)]), WHOLE_TEST_S)
    finally: await provider.aclose()

def assert_no_key(rows, errors=()):
    for text in [repr(r) for r in rows] + [str(e) for e in errors]:
        assert FAKE_KEY not in text and 'sk-test' not in text

def test_clean_run():
    rows = []
    with sim_server.serve() as server:
        p = OpenAIProvider(config(server), telemetry=rows.append, run_id='clean')
        out = asyncio.run(run_calls(p, 50))
        assert out == [f'question number {i}' for i in range(50)]
        assert server.stats['requests'] == 50
    assert len(rows) == 50 and len({r['call_id'] for r in rows}) == 50
    # sent without a format
    assert all(tuple(r) == TELEMETRY_KEYS + ('reply_format', ) and r['reply_format'] == 'none' for r in rows)
    assert ({(r['status'], r['attempt'], r['cache_hit'], r['run_id'], r['role'], r['model']) for r in rows}
            == {('ok', 1, False, 'clean', 'agent', 'sim-echo')})
    assert all(r['prompt_tokens'] > 0 and r['completion_tokens'] > 0 and r['latency_s'] > 0 for r in rows)
    assert_no_key(rows)

FAULTS = sim_server.Faults(rate_429=0.07, rate_500=0.07, rate_hang=0.05, rate_malformed=0.06,  # 30% in all
                           rate_empty=0.05, retry_after_s=0.15, hang_s=3.0, seed=11)

def test_faults_every_call_accounted_for(tmp_path):
    n, rows, log = 80, [], HarnessLog(tmp_path/'harness.db')
    def telemetry(row):  # what the runner wires up
        rows.append(row)
        log.record_llm_call(row)
    with sim_server.serve(faults=FAULTS) as server:
        p = OpenAIProvider(config(server, timeout_s=1.0), telemetry=telemetry, run_id='faults')
        out = asyncio.run(run_calls(p, n))  # within WHOLE_TEST_S, or a TimeoutError
        stats = server.stats
    stored = log.frame('llm_calls')
    log.close()
    assert stored.height == n and stored['attempt'].sum() == stats['requests'] and set(stored['run_id']) == {'faults'}
    # every call ends with its own echo or an InfraError; none is dropped or answered with another call's text
    assert len(out) == n
    for i, o in enumerate(out): assert o == f'question number {i}' or isinstance(o, InfraError), (i, o)
    errors = [o for o in out if isinstance(o, InfraError)]
    for e in errors:
        assert 'role=agent' in str(e) and 'model=sim-echo' in str(e) and f'endpoint={server.base_url}' in str(e)
    # one telemetry row per call, and the rows' attempts add up to what the server saw
    assert len(rows) == n and len({r['call_id'] for r in rows}) == n
    assert sum(r['attempt'] for r in rows) == stats['requests']
    assert Counter(r['status'] for r in rows) == Counter({'ok': n - len(errors), 'error': len(errors)})
    # faults of every kind really happened and were retried
    for kind in sim_server.FAULT_KINDS: assert stats[kind] > 0, (kind, stats)
    retried = [r for r in rows if r['attempt'] > 1]
    assert len(retried) >= 10, stats
    assert stats['requests'] > n
    assert_no_key(rows, errors)

def test_retry_after_is_honoured():
    rows = []
    with sim_server.serve(faults=sim_server.Faults(rate_429=1.0, retry_after_s=0.3)) as server:
        p = OpenAIProvider(config(server, max_retries=2, breaker_threshold=10), telemetry=rows.append)
        t0 = time.monotonic()
        out = asyncio.run(run_calls(p, 1))
        took = time.monotonic() - t0
        assert server.stats['requests'] == 3
    assert isinstance(out[0], InfraError) and 'HTTP 429' in str(out[0]) and 'after 3 attempt(s)' in str(out[0])
    assert took >= 0.6  # two waits of at least Retry-After 0.3 s, although the backoff alone is <= 0.1 s
    assert rows[0]['status'] == 'error' and rows[0]['attempt'] == 3 and '429' in rows[0]['error']

async def outage_then_recovery(port:int, rows:list) -> list:
    "Drive one provider through: outage -> breaker opens -> fails fast -> failed probe -> healthy -> probe closes it."
    events = []
    async def call(i):
        t0 = time.monotonic()
        try: out = (await p.chat(messages(i))).content
        except InfraError as e: out = e
        return out, time.monotonic() - t0
    down, down_open = sim_server.serve(port=port, faults=sim_server.Faults(rate_500=1.0)), True
    cfg = config(down, max_retries=1, breaker_threshold=3, breaker_cooldown_s=0.5)
    p = OpenAIProvider(cfg, telemetry=rows.append)
    try:
        for i in range(3): events.append(('failed', *await call(i), down.stats['requests']))
        events.append(('open', p.breaker.state))
        events.append(('fast', *await call(3), down.stats['requests']))
        await asyncio.sleep(0.55)
        events.append(('probe-fails', *await call(4), down.stats['requests'], p.breaker.state))
        down.close()
        down_open = False
        with sim_server.serve(port=port) as up:
            events.append(('still-open', *await call(5), up.stats['requests']))
            await asyncio.sleep(0.55)
            events.append(('probe-ok', *await call(6), up.stats['requests'], p.breaker.state))
            events.append(('closed', *await call(7), up.stats['requests']))
    finally:
        if down_open: down.close()
        await p.aclose()
    return events

def test_breaker_opens_fails_fast_and_closes():
    with sim_server.serve() as probe: port = probe.port  # a free port for the outage and the healthy server
    rows = []
    ev = asyncio.run(asyncio.wait_for(outage_then_recovery(port, rows), WHOLE_TEST_S))
    *failed, opened, fast, probe_fails, still_open, probe_ok, closed = ev
    # outage: each call spends its 2 attempts and fails; the third failure opens the breaker
    assert [(type(e[1]), e[3]) for e in failed] == [(InfraError, 2), (InfraError, 4), (InfraError, 6)]
    assert all('after 2 attempt(s)' in str(e[1]) and 'HTTP 500' in str(e[1]) for e in failed)
    assert opened == ('open', 'open')
    # open: fails at once, no request reaches the server (the request count proves it; no wall-clock bound)
    assert isinstance(fast[1], InfraError) and 'circuit breaker open' in str(fast[1]) and fast[3] == 6
    # after the cool-down one probe goes out (2 attempts), fails, and the breaker opens again
    assert isinstance(probe_fails[1], InfraError) and probe_fails[3] == 8 and probe_fails[4] == 'open'
    # the endpoint is healthy again but the cool-down restarted: still failing fast, server untouched
    assert isinstance(still_open[1], InfraError) and 'circuit breaker open' in str(still_open[1]) and still_open[3] == 0
    # after the cool-down the probe succeeds and closes the breaker; later calls go through
    assert probe_ok[1] == 'question number 6' and probe_ok[3] == 1 and probe_ok[4] == 'closed'
    assert closed[1] == 'question number 7' and closed[3] == 2
    assert [r['status'] for r in rows] == ['error']*3 + ['breaker_open', 'error', 'breaker_open', 'ok', 'ok']
    assert_no_key(rows, [e[1] for e in ev if len(e) > 2 and isinstance(e[1], InfraError)])

def test_second_run_served_from_cache(tmp_path):
    rows1, rows2 = [], []
    with sim_server.serve() as server:
        cache = ResponseCache(tmp_path/'llm_cache.sqlite')
        first = asyncio.run(run_calls(OpenAIProvider(config(server), cache=cache, telemetry=rows1.append), 30))
        after_first = server.stats['requests']
        cache.close()
        cache = ResponseCache(tmp_path/'llm_cache.sqlite')  # a fresh process would reopen the file like this
        second = asyncio.run(run_calls(OpenAIProvider(config(server), cache=cache, telemetry=rows2.append), 30))
        assert server.stats['requests'] == after_first == 30
        cache.close()
    assert second == first == [f'question number {i}' for i in range(30)]
    assert {(r['status'], r['cache_hit']) for r in rows1} == {('ok', False)}
    assert {(r['status'], r['cache_hit'], r['latency_s'], r['cost']) for r in rows2} == {('cache_hit', True, 0.0, 0.0)}
