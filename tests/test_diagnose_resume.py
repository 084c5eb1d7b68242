("Diagnosis over real HTTP (sim server + OpenAIProvider): an interrupted run resumes without re-asking the judge about "
 "finished questions; failed calls degrade rows instead of aborting.")
import asyncio, json, time

import polars as pl
import pytest

from treetrm.core import ConfigError, project_root
from treetrm.data import load_questions
from treetrm.proposers.diagnose import diagnose
from treetrm.llm.client import OpenAIProvider
from treetrm.llm.config import RoleConfig
from treetrm.log import HarnessLog
from treetrm.sim.world import make_world
from treetrm.sim.server import Faults, serve

SKILLS = project_root()/'prompts'/'skills'


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('world'), seed=7, n_videos=3)


def baseline(log, qs, run_id='base'):
    "Every question answered wrong (one letter off), two of them with an INFRA stop reason."
    rows = []
    for i, q in enumerate(qs):
        wrong = 'ABCD'[('ABCD'.index(q.answer) + 1) % len(q.options)]
        rows.append(dict(run_id=run_id, question_id=q.question_id, video_id=q.video_id, task_type=q.task_type,
                         prediction=wrong, answer=q.answer, correct=False, stop_reason='error' if i < 2 else 'finished',
                         steps_used=1, tokens=1, latency=0.0,
                         steps_json=json.dumps([{'tool': 'view_node', 'args': {'node_id': 'x'},
                                                 'output': '[node] x'}])))
    log.insert('predictions', rows)


def settled_requests(server, quiet:float=1.0) -> int:
    ("The sim server's request count once none has arrived for `quiet` seconds: "
     "a call cancelled mid-flight may still land.")
    n = server.stats['requests']
    while True:
        time.sleep(quiet)
        if server.stats['requests'] == n: return n
        n = server.stats['requests']


def judge_for(server, log, **cfg):
    config = RoleConfig('sim-judge', server.base_url, api_key='sk-test-not-a-key', role='judge', **cfg)
    return OpenAIProvider(config, telemetry=log.record_llm_call, run_id='diag')


def test_interrupted_diagnosis_resumes_without_re_asking(world, tmp_path):
    qs = load_questions(world/'questions.jsonl')
    log = HarnessLog(tmp_path/'harness.db')
    baseline(log, qs)
    n_diagnosable = len(qs) - 2
    with serve(world_dir=world, latency_s=0.02) as server:
        judge = judge_for(server, log)

        async def interrupted():
            task = asyncio.create_task(diagnose(qs, log=log, baseline_run_id='base', judge=judge, skills_dir=SKILLS,
                                                concurrency=2))
            while log.frame('diagnosis_signals', 'base').filter(pl.col('tier') != 'T0').height < 6:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError): await task
        asyncio.run(interrupted())
        done = log.frame('diagnosis_signals', 'base').filter(pl.col('tier') != 'T0')
        assert 6 <= done.height < n_diagnosable
        requests_before = settled_requests(server)  # the cancelled run's last request may reach the server late
        ok_calls_before = log.frame('llm_calls', 'diag', status='ok').height

        result = asyncio.run(diagnose(qs, log=log, baseline_run_id='base', judge=judge, skills_dir=SKILLS,
                                      concurrency=2))
        new_requests = server.stats['requests'] - requests_before
    # the judge was asked exactly once for each question that had no row, never for a finished one
    assert (result.n_skipped, result.n_judged) == (done.height, n_diagnosable - done.height)
    assert new_requests == n_diagnosable - done.height == result.judge_calls
    assert log.frame('llm_calls', 'diag', status='ok').height - ok_calls_before == new_requests
    sig = result.signals
    assert sig.height == len(qs) and sig['question_id'].n_unique() == len(qs)
    assert sorted(sig.filter(pl.col('tier') == 'T0')['question_id'].to_list()) == sorted(q.question_id for q in qs[:2])
    assert set(sig.filter(~pl.col('infra'))['tier'].to_list()) <= {'T1', 'T2'} and not sig['degraded'].any()
    # the rows written before the interruption are untouched
    assert done.drop('created_at').equals(sig.filter(pl.col('question_id').is_in(done['question_id'].to_list()))
                                          .filter(pl.col('tier') != 'T0').drop('created_at'))


def test_failed_judge_calls_degrade_rows_and_do_not_abort(world, tmp_path):
    qs = load_questions(world/'questions.jsonl')
    log = HarnessLog(tmp_path/'harness.db')
    baseline(log, qs)
    with serve(world_dir=world, faults=Faults(rate_500=0.5, seed=3)) as server:
        judge = judge_for(server, log, max_retries=0, breaker_threshold=10_000)
        result = asyncio.run(diagnose(qs, log=log, baseline_run_id='base', judge=judge, skills_dir=SKILLS,
                                      concurrency=4))
        assert 0 < result.n_degraded < result.n_judged
        degraded = result.signals.filter(pl.col('degraded'))
        assert (degraded['tier'].null_count() == degraded.height and degraded['cause'].str.contains('judge call failed')
                .all())
    # the endpoint, not the judge, failed those cases: a resume against a healthy endpoint asks for exactly them again
    with serve(world_dir=world) as server:
        again = asyncio.run(diagnose(qs, log=log, baseline_run_id='base', judge=judge_for(server, log),
                                     skills_dir=SKILLS))
    assert (again.n_judged, again.judge_calls, again.n_degraded) == (degraded.height, degraded.height, 0)
    assert again.signals.height == result.signals.height and not again.signals['degraded'].any()
    # the rows that changed are exactly the degraded ones: every other question keeps the row it had
    before, after = (r.signals.drop('created_at').sort('question_id') for r in (result, again))
    assert before['question_id'].to_list() == after['question_id'].to_list()
    changed = [b['question_id'] for b, a in zip(before.iter_rows(named=True), after.iter_rows(named=True)) if a != b]
    assert sorted(changed) == sorted(degraded['question_id'].to_list()), (changed, degraded['question_id'].to_list())


def test_judge_model_that_differs_from_the_provider_is_a_config_error(world, tmp_path):
    qs = load_questions(world/'questions.jsonl')
    log = HarnessLog(tmp_path/'harness.db')
    baseline(log, qs)
    with serve(world_dir=world) as server:
        # configured for another model than judge_model
        judge = OpenAIProvider(RoleConfig('sim-evolver', server.base_url, role='judge'))
        with pytest.raises(ConfigError, match='judge_model'):
            asyncio.run(diagnose(qs, log=log, baseline_run_id='base', judge=judge, skills_dir=SKILLS,
                                 judge_model='sim-judge'))
