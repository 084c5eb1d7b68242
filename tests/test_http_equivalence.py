("The same inference through OpenAIProvider over real HTTP to the sim server gives exactly what the in-process "
 "SimAgent gives.")
import asyncio, json
import polars as pl
from treetrm.bench.throughput import config_rules, skills_with_rules
from treetrm.core import project_root
from treetrm.data import load_questions
from treetrm.agent.inference import run_inference
from treetrm.llm.client import OpenAIProvider
from treetrm.llm.config import load_role_config
from treetrm.log import HarnessLog
from treetrm.sim.world import ensure_demo_world, load_world
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.server import serve
import pytest

DEMO = ensure_demo_world()

def mixed_skills(tmp_path):
    ("Seed skills with the helpful rules of some task types and a trap rule of the others, "
     "so rule-driven paths are exercised.")
    world, helpful, trap = load_world(), config_rules(load_world(), 'helpful'), config_rules(load_world(), 'trap')
    rules = {tt: (helpful if i % 2 else trap)[tt] for i, tt in enumerate(world['task_types'])}
    return skills_with_rules(project_root()/'prompts'/'skills', tmp_path/'skills', rules)

async def infer(provider, log, run_id, questions, skills):
    await run_inference(questions, trees_dir=DEMO/'trees', provider=provider, log=log, run_id=run_id, skills_dir=skills,
                        concurrency=8, seed=11, progress=False)
    p = log.predictions(run_id).sort('question_id')
    replies = [[s['raw'] for s in json.loads(j)] for j in p['steps_json']]
    return p.select('question_id', 'prediction', 'stop_reason', 'steps_used', 'tokens'), replies

@pytest.mark.slow
def test_http_matches_in_process(tmp_path):
    questions, skills = load_questions(DEMO/'questions.jsonl')[:65], mixed_skills(tmp_path)
    # one log per path and the same run id: the per-question sampling seed derives from the run id
    log, http_log = HarnessLog(tmp_path/'local.db'), HarnessLog(tmp_path/'http.db')
    local, local_replies = asyncio.run(infer(SimAgent(DEMO, seed=0), log, 'equiv', questions, skills))
    with serve(world_dir=DEMO, seed=0) as srv:
        env = {'TREETRM_AGENT_MODEL': 'sim-agent', 'TREETRM_AGENT_BASE_URL': srv.base_url,
               'TREETRM_AGENT_API_KEY': 'sk-dummy'}
        provider = OpenAIProvider(load_role_config('agent', env=env))
        async def go():
            try: return await infer(provider, http_log, 'equiv', questions, skills)
            finally: await provider.aclose()
        remote, remote_replies = asyncio.run(go())
        requests = srv.stats['requests']
    log.close()
    http_log.close()
    assert local.height == len(questions) and set(local['stop_reason']) == {'finished'}
    assert local['prediction'].n_unique() > 1 and local['steps_used'].n_unique() > 3  # a real mix of answers and paths
    assert remote.drop('tokens').equals(local.drop('tokens'))
    assert remote_replies == local_replies  # every turn's reply is the same text
    assert requests == sum(map(len, remote_replies))  # one HTTP request per agent turn
    assert (remote['tokens'] > 0).all()
