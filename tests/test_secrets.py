"""Secrets: with every `TREETRM_<ROLE>_API_KEY` set to a canary, the split, train and eval stage notebooks run on
backend "openai" against the HTTP sim, and the canary shows up in no file of the workspace, no output notebook, no
log, no figure and no database row."""
import base64, json, sqlite3
from pathlib import Path

import papermill as pm
import pytest

from treetrm.core import project_root
from treetrm.train.runner import DEFAULT_SPLIT
from treetrm.sim.world import make_world
from treetrm.sim.server import serve

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = project_root()
# not key-shaped (no 'sk-' prefix), so only real redaction can keep it out, not the key-shape pattern
CANARY = 'CANARYc4n4ry7f3a9e1d5b2'
ROLES = ('agent', 'judge', 'evolver')

def forms(secret:str) -> list[bytes]:
    "The canary as it could leak: plain, in an Authorization header, base64."
    return [secret.encode(), f'Bearer {secret}'.encode(), base64.b64encode(secret.encode())]

def leaks(root:Path) -> list[str]:
    "Files under `root` that hold the canary in any form."
    return [str(p) for p in root.rglob('*') if p.is_file() and any(f in p.read_bytes() for f in forms(CANARY))]

def db_rows_with_canary(db:Path) -> list[str]:
    "Tables of harness.db with a row whose text holds the canary."
    conn, hits = sqlite3.connect(db), []
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info({table})')]
            cond = ' OR '.join(f'CAST({c} AS TEXT) LIKE ?' for c in cols)
            if conn.execute(f'SELECT count(*) FROM {table} WHERE {cond}', [f'%{CANARY}%'] * len(cols)).fetchone()[0]:
                hits.append(table)
    finally: conn.close()
    return hits

def run(nb:str, out:Path, logs:list, **params):
    "Execute a stage notebook with papermill, keeping its log output."
    pm.execute_notebook(str(ROOT/'nbs'/nb), str(out), parameters=params, kernel_name='python3', cwd=str(ROOT/'nbs'),
                        progress_bar=False, log_output=True, stdout_file=logs[0], stderr_file=logs[1])

def test_canary_key_leaks_nowhere(tmp_path, monkeypatch):
    world = make_world(tmp_path/'world', seed=2, n_videos=16)
    ws, outs = tmp_path/'ws', tmp_path/'out'
    outs.mkdir()
    with serve(world_dir=world) as srv, open(outs/'stdout.log', 'w') as so, open(outs/'stderr.log', 'w') as se:
        for role in ROLES:
            monkeypatch.setenv(f'TREETRM_{role.upper()}_MODEL', f'sim-{role}')
            monkeypatch.setenv(f'TREETRM_{role.upper()}_BASE_URL', srv.base_url)
            monkeypatch.setenv(f'TREETRM_{role.upper()}_API_KEY', CANARY)
            monkeypatch.setenv(f'TREETRM_{role.upper()}_TIMEOUT', '30')
        common = dict(workspace=str(ws), data_dir=str(world), backend='openai', concurrency=8)
        run('split.ipynb', outs/'split.ipynb', [so, se], **common,
            **{k: v for k, v in DEFAULT_SPLIT.items() if k != 'seed'}, seed=DEFAULT_SPLIT['seed'])
        run('train.ipynb', outs/'train.ipynb', [so, se], **common, run_id='v1', epochs=1, batch_size=8,
            min_ladder_units=3, ladder_cap=12, min_n=5, show_steps=True)
        run('eval.ipynb', outs/'eval.ipynb', [so, se], **common, skills_version='best', pool='test')
        requests = srv.stats['requests']
    assert requests > 100  # the stages really went through the HTTP endpoint with the key
    # the canary is nowhere: workspace files (harness.db and its WAL, skills, pools, runs, figures), notebooks, logs
    figures = [p for p in ws.rglob('*') if p.suffix in ('.png', '.pdf', '.svg')]
    assert figures and (ws/'harness.db').exists() and len(list(outs.glob('*.ipynb'))) == 3
    assert leaks(ws) == [] and leaks(outs) == []
    assert db_rows_with_canary(ws/'harness.db') == []
    assert CANARY not in json.dumps([json.loads((outs/f'{n}.ipynb').read_text())['metadata']
                                     for n in ('split', 'train', 'eval')])
    # the calls themselves were recorded (without the key)
    calls = sqlite3.connect(ws/'harness.db').execute('SELECT count(*) FROM llm_calls').fetchone()[0]
    assert calls > 0
