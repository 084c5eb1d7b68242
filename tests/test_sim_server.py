"The sim server over real HTTP: roles, faults, Retry-After, the model list, the CLI and a clean shutdown."
import json, subprocess, sys, threading, time, urllib.error, urllib.request
from pathlib import Path
import pytest
from treetrm.sim.server import FAULT_KINDS, Faults, SimServer, serve

ROOT = Path(__file__).resolve().parents[1]
HELLO = {'model': 'sim-echo',
         'messages': [{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': 'ping 42'}]}

def post(base_url, body, timeout=10.0, raw=None):
    "POST to /chat/completions; (status, body bytes, headers) also for HTTP errors."
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(base_url + '/chat/completions', data=data,
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r: return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e: return e.code, e.read(), e.headers

def content(body): return json.loads(body)['choices'][0]['message']['content']

@pytest.fixture
def threads_before():
    before = set(threading.enumerate())
    yield before
    deadline = time.time() + 5
    while time.time() < deadline and set(threading.enumerate()) - before: time.sleep(0.05)
    assert not set(threading.enumerate()) - before, f'threads left: {set(threading.enumerate()) - before}'

def test_echo_roundtrip_shape_and_usage(threads_before):
    with serve() as srv:
        assert srv.base_url.startswith('http://127.0.0.1:') and srv.base_url.endswith('/v1')
        status, body, _ = post(srv.base_url, HELLO)
        reply = json.loads(body)
        assert status == 200 and content(body) == 'ping 42' and reply['model'] == 'sim-echo'
        u = reply['usage']
        assert (u['prompt_tokens'] >= 4 and u['completion_tokens'] >= 1 and u['total_tokens'] == u['prompt_tokens']
                + u['completion_tokens'])
        assert srv.stats['requests'] == 1 and srv.stats['ok'] == 1

def test_models_listing(threads_before):
    with serve() as srv, urllib.request.urlopen(srv.base_url + '/models', timeout=5) as r:
        ids = [m['id'] for m in json.load(r)['data']]
    assert {'sim-echo', 'sim-judge', 'sim-evolver'} <= set(ids)

def test_bad_requests_are_4xx(threads_before):
    with serve() as srv:
        assert post(srv.base_url, None, raw=b'{not json')[0] == 400
        assert post(srv.base_url, {**HELLO, 'model': 'no-such-model'})[0] == 404
        assert post(srv.base_url, {'model': 'sim-echo', 'messages': []})[0] == 400
        assert (post(srv.base_url, {'model': 'sim-judge', 'messages': [{'role': 'user', 'content': 'no context'}]})[0]
                == 400)
        assert srv.stats['bad_request'] == 4 and srv.stats['ok'] == 0

def test_every_fault_kind_appears_and_is_counted(threads_before):
    faults = Faults(rate_429=0.2, rate_500=0.2, rate_hang=0.2, rate_malformed=0.2, rate_empty=0.2, retry_after_s=0.25,
                    hang_s=0.2, seed=1)
    seen = {k: 0 for k in (*FAULT_KINDS, 'ok')}
    with serve(faults=faults) as srv:
        for _ in range(40):
            t0 = time.time()
            status, body, headers = post(srv.base_url, HELLO)
            dt = time.time() - t0
            if status == 429:
                assert headers['Retry-After'] == '0.25'
                seen['429'] += 1
            elif status == 500: seen['500'] += 1
            else:
                assert status == 200
                try: reply = json.loads(body)
                except json.JSONDecodeError:
                    seen['malformed'] += 1
                    continue
                text = reply['choices'][0]['message']['content']
                if text == '': seen['empty'] += 1
                else:
                    assert text == 'ping 42'
                    seen['ok'] += 1
                    if dt >= 0.2: seen['hang'] += 1
        stats = srv.stats
    assert stats['requests'] == 40
    for k in FAULT_KINDS: assert seen[k] > 0 and stats[k] == seen[k], (k, seen, stats)
    assert stats['ok'] == seen['ok']

def test_faults_repeat_for_the_same_seed(threads_before):
    def pattern(seed):
        with serve(faults=Faults(rate_429=0.3, rate_500=0.3, seed=seed)) as srv:
            return [post(srv.base_url, HELLO)[0] for _ in range(20)]
    assert pattern(5) == pattern(5) and pattern(5) != pattern(6)

def test_client_timeout_on_hang_and_close_cuts_the_hang(threads_before):
    with serve(faults=Faults(rate_hang=1.0, hang_s=30.0)) as srv:
        with pytest.raises(Exception): post(srv.base_url, HELLO, timeout=0.3)
        t0 = time.time()
    # a hang guard, not a speed claim: without close() cutting it the hang lasts ~30 s more
    assert time.time() - t0 < 20

class BarrierServer(SimServer):
    ("SimServer whose handlers all wait at one barrier before answering: "
     "it lets them through only when 8 are in at once.")
    @property
    def latency_s(self):
        self.barrier.wait()
        return 0.0
    @latency_s.setter
    # a hang guard: served one at a time, it breaks
    def latency_s(self, v): self.barrier = threading.Barrier(8, timeout=30)

def test_concurrent_requests(threads_before):
    with BarrierServer() as srv:
        out = [None] * 8
        def go(i):
            out[i] = content(post(srv.base_url, {**HELLO, 'messages': [{'role': 'user', 'content': f'm{i}'}]},
                                  timeout=60)[1])
        ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        # all 8 were in flight at once, and each got its own answer
        assert out == [f'm{i}' for i in range(8)] and not srv.barrier.broken

def test_openai_client_against_server(threads_before):
    openai = pytest.importorskip('openai')
    import asyncio
    async def go(url):
        async with openai.AsyncOpenAI(base_url=url, api_key='sim', max_retries=0) as c:
            r = await c.chat.completions.create(model='sim-echo', messages=[{'role': 'user', 'content': 'hi there'}],
                                                seed=1)
            return r.choices[0].message.content, r.usage.total_tokens
    with serve() as srv: text, total = asyncio.run(go(srv.base_url))
    assert text == 'hi there' and total > 0

def test_cli_serves_from_a_terminal():
    proc = subprocess.Popen([sys.executable, '-m', 'treetrm.sim.server', 'serve', '--port', '0'], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.split(' at ')[1].split()[0]
        status, body, _ = post(url, HELLO)
        assert status == 200 and content(body) == 'ping 42'
    finally:
        proc.terminate()
        proc.wait(5)

def _ctx_message(ctx): return [{'role': 'user', 'content': f'Context follows.\n```json\n{json.dumps(ctx)}\n```'}]

def test_judge_and_evolver_over_http(threads_before):
    from treetrm.sim.world import load_world
    world = load_world()
    qid, ev = next((q, e) for q, e in sorted(world['evidence'].items()) if e['requires'])
    diag_ctx = {'kind': 'diagnose', 'question_id': qid, 'video_id': ev['video_id'], 'task_type': ev['task_type'],
                'question': 'q', 'options': [], 'answer': 'A', 'prediction': 'B', 'skill_file': 'x.md', 'steps': []}
    evo_ctx = {'kind': 'evolve', 'task_type': ev['task_type'], 'target': 'x.md', 'skill_text': '', 'failures': [],
               'successes': [], 'blacklist': []}
    with serve() as srv:
        s1, b1, _ = post(srv.base_url, {'model': 'sim-judge', 'messages': _ctx_message(diag_ctx), 'seed': 3})
        s2, b2, _ = post(srv.base_url, {'model': 'sim-judge', 'messages': _ctx_message(diag_ctx), 'seed': 3})
        s3, b3, _ = post(srv.base_url, {'model': 'sim-evolver', 'messages': _ctx_message(evo_ctx), 'seed': 1})
    diag, edit = json.loads(content(b1)), json.loads(content(b3))
    assert s1 == s2 == s3 == 200 and content(b1) == content(b2)  # same request, same reply
    assert diag['tier'] in ('T1', 'T2') and set(diag) >= {'error_type', 'cause', 'missed_nodes', 'skill_adherence',
                                                          'evolution_target', 'confidence'}
    assert (edit['target'] == 'x.md' and edit['ops'][0]['op'] == 'append_to_section'
            and edit['ops'][0]['text'].startswith('- '))
    rule_texts = {r['text'] for r in world['task_types'][ev['task_type']]['rules']}
    assert edit['ops'][0]['text'][2:] in rule_texts
