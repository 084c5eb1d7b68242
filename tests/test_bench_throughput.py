"The throughput benchmark notebook runs under papermill and the harness reaches 90% of the ideal rate."
import json
from pathlib import Path
import papermill as pm

ROOT = Path(__file__).resolve().parents[1]

def test_bench_throughput_notebook(tmp_path):
    out = tmp_path/'bench'/'throughput.json'
    L, C, N = 0.1, 8, 160  # 20 questions per slot keeps the end-of-run tail to a few percent
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'throughput.ipynb'), str(tmp_path/'throughput_out.ipynb'), kernel_name='python3',
                        parameters=dict(n_questions=N, latency_s=L, concurrency=C, cpu_questions=40, out=str(out)), cwd=str(ROOT), progress_bar=False)
    f = json.loads(out.read_text())
    assert (f['latency_s'], f['concurrency'], f['n_questions'], f['cpu_run']['n_questions']) == (L, C, N, 40)
    assert 3 <= f['calls_per_question'] <= 16
    ideal = C / (L * f['calls_per_question'])
    assert abs(f['ideal_questions_per_s'] - ideal) < 1e-2 and abs(f['questions_per_s'] - N / f['wall_s']) < 1e-2
    assert f['questions_per_s'] <= ideal * 1.02  # nothing runs faster than its latency allows
    assert f['ratio'] >= 0.9, f
    assert 0 < f['cpu_run']['harness_cpu_ms_per_step'] < 5.0, f['cpu_run']
