"""The throughput benchmark notebook runs under papermill, answers and persists every question, and reports
self-consistent figures. How fast the machine is belongs to the benchmark's JSON, not to this test."""
import json
from pathlib import Path
import papermill as pm
from treetrm.agent.navigate import INFRA_STOP_REASONS
from treetrm.data import load_questions
from treetrm.log import HarnessLog
from treetrm.sim.world import world_path
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = Path(__file__).resolve().parents[1]

def test_bench_throughput_notebook(tmp_path):
    out = tmp_path/'bench'/'throughput.json'
    work = tmp_path/'work'  # the runs' logs, kept (without a workdir they go with their temporary folder)
    L, C, N, NC = 0.1, 8, 160, 40
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'throughput.ipynb'), str(tmp_path/'throughput_out.ipynb'),
                        kernel_name='python3',
                        parameters=dict(n_questions=N, latency_s=L, concurrency=C, cpu_questions=NC, out=str(out),
                                        workdir=str(work)),
                        cwd=str(ROOT), progress_bar=False)
    f = json.loads(out.read_text())
    assert (f['latency_s'], f['concurrency'], f['n_questions'], f['cpu_run']['n_questions']) == (L, C, N, NC)
    assert 3 <= f['calls_per_question'] <= 16
    # the figures are consistent with each other (arithmetic, not a claim about speed)
    ideal = C / (L * f['calls_per_question'])
    assert abs(f['ideal_questions_per_s'] - ideal) < 1e-2 and abs(f['questions_per_s'] - N / f['wall_s']) < 1e-2
    assert abs(f['ratio'] - f['questions_per_s'] / f['ideal_questions_per_s']) < 1e-3
    assert f['wall_s'] > 0 and f['cpu_run']['wall_s'] > 0 and f['cpu_run']['steps'] >= NC
    # every question of both runs was answered once and persisted, none ended in an INFRA stop reason
    qs = load_questions(world_path(None)/'questions.jsonl')
    for run_id, n in (('latency', N), ('cpu', NC)):
        with HarnessLog(work/f'{run_id}.db') as log: p = log.predictions(run_id)
        assert sorted(p['question_id']) == sorted(q.question_id for q in qs[:n]), run_id
        assert not set(p['stop_reason']) & INFRA_STOP_REASONS, (run_id, p['stop_reason'].value_counts())
        assert all((s or '').strip() for s in p['prediction']), run_id
