("One role over three sim servers (real HTTP), one of them failing every request: "
 "every question is answered exactly as one healthy server answers it, the failing endpoint's breaker opens, "
 "and telemetry says which endpoint answered each call.")
import asyncio, contextlib, json

from treetrm.llm.backends import EndpointPool, make_providers
from treetrm.llm.ledger import CallRecorder
from treetrm.core import project_root
from treetrm.data import load_questions
from treetrm.agent.inference import run_inference
from treetrm.llm.config import endpoint_host
from treetrm.log import HarnessLog
from treetrm.sim.world import ensure_demo_world
from treetrm.sim.server import Faults, serve

DEMO = ensure_demo_world()
QUESTIONS = load_questions(DEMO/'questions.jsonl')[:40]


async def infer(env: dict, log: HarnessLog) -> tuple:
    "The agent's predictions of QUESTIONS through the role the variables describe; (predictions, provider)."
    provider = make_providers('openai', roles=('agent', ), env=env, telemetry=CallRecorder(log), run_id='pool')['agent']
    try:
        await run_inference(QUESTIONS, trees_dir=DEMO/'trees', provider=provider, log=log, run_id='pool',
                            skills_dir=project_root()/'prompts'/'skills', concurrency=8, seed=11, progress=False)
    finally:
        await provider.aclose()
    return log.predictions('pool').select('question_id', 'prediction', 'stop_reason', 'steps_used'), provider


def agent_env(base_url: str) -> dict:
    return {'TREETRM_AGENT_MODEL': 'sim-agent', 'TREETRM_AGENT_BASE_URL': base_url, 'TREETRM_AGENT_API_KEY': 'sk-dummy'}


def test_three_endpoints_one_failing_every_request(tmp_path):
    with contextlib.ExitStack() as stack:
        one, a, b = (stack.enter_context(serve(world_dir=DEMO, seed=0)) for _ in range(3))
        bad = stack.enter_context(serve(world_dir=DEMO, seed=0, faults=Faults(rate_500=1.0)))
        with contextlib.closing(HarnessLog(tmp_path/'one.db')) as log:
            single, provider = asyncio.run(infer(agent_env(one.base_url), log))
        assert type(provider).__name__ == 'OpenAIProvider'  # one URL: the provider it always was
        with contextlib.closing(HarnessLog(tmp_path/'pool.db')) as log:
            pooled, pool = asyncio.run(infer(agent_env(f'{bad.base_url},{a.base_url},{b.base_url}'), log))
            calls = log.frame('llm_calls', 'pool')
        stats = {'bad': bad.stats, 'a': a.stats, 'b': b.stats, 'one': one.stats}
    # every question answered, none lost, and exactly as one healthy server answers it
    assert pooled.height == len(QUESTIONS) and set(pooled['stop_reason']) <= {'finished', 'budget_exceeded'}
    assert pooled.equals(single)
    assert isinstance(pool, EndpointPool) and pool.endpoints[0].breaker.state == 'open'
    hosts = {'bad': endpoint_host(bad.base_url), 'a': endpoint_host(a.base_url), 'b': endpoint_host(b.base_url)}
    rows = [(json.loads(e) if isinstance(e, str) else e or {}, s) for e, s in calls.select('extra', 'status').rows()]
    by = {name: [s for extra, s in rows if extra.get('endpoint') == host] for name, host in hosts.items()}
    assert len(rows) == sum(map(len, by.values()))  # every row names its endpoint
    assert set(by['bad']) == {'error'} and len(by['bad']) == stats['bad']['requests'] >= 5  # breaker threshold
    assert by['a'].count('ok') == stats['a']['ok'] > 0 and by['b'].count('ok') == stats['b']['ok'] > 0
    assert stats['a']['ok'] + stats['b']['ok'] == stats['one']['requests']  # one answered request per agent turn
    assert stats['bad']['ok'] == 0
