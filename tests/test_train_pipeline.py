("The three stage notebooks run through papermill on a small sim world — split, then train, "
 "then eval — and leave their artifacts: pools, checkpoint, metrics.json, skills versions, figures, "
 "and the reports in the output notebooks.")
import json

import papermill as pm
import pytest

from treetrm.core import project_root, read_json
from treetrm.sim.world import make_world
from treetrm.agent.versions import VersionStore, load_manifest

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

ROOT = project_root()
NBS = ROOT/'nbs'


def run(nb, out, **params):
    pm.execute_notebook(str(NBS/nb), str(out), parameters=params, kernel_name='python3', cwd=str(NBS),
                        progress_bar=False)
    return json.loads(out.read_text())


def outputs(nb) -> list:
    return [o for c in nb['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', [])]


def text_of(nb) -> str:
    return json.dumps(outputs(nb))


@pytest.mark.parametrize('name', ['train.ipynb', 'eval.ipynb'])
def test_stage_notebook_is_committed_clean(name):
    nb = json.loads((NBS/name).read_text())
    assert nb['cells'][0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(nb['cells'][0]['source'])
    assert sum('parameters' in c.get('metadata', {}).get('tags', []) for c in nb['cells']) == 1
    assert all(not c.get('outputs') and not c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code')
    assert not any('asyncio.run' in ''.join(c['source']) for c in nb['cells'])


def test_split_train_eval(tmp_path):
    world, ws = make_world(tmp_path/'world', seed=1, n_videos=16), tmp_path/'ws'
    split = run('split.ipynb', tmp_path/'split.ipynb', workspace=str(ws), data_dir=str(world), seed=0, test_ratio=0.25,
                epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2, concurrency=4, backend='sim')
    assert (ws/'pools'/'pools.json').exists()
    # the power statement: the discordance of a second draw, and per type the smallest edit the gate can confirm
    assert (ws/'pools'/'discordance.json').exists()
    assert 'asked twice' in text_of(split) and 'min_edit_points' in text_of(split)
    assert 'tokens_per_answer' in text_of(split) and 'cached share' in text_of(split)  # what the split spent

    # a config file under the notebook's parameters: the file sets these, the parameters win
    cfg = tmp_path/'small.yaml'
    cfg.write_text('train:\n  min_ladder_units: 8\n  epochs: 5\n  batch: {batch_size: 8}\n')
    train = run('train.ipynb', tmp_path/'train.ipynb', run_id='p1', workspace=str(ws), data_dir=str(world),
                config=str(cfg), epochs=2, concurrency=4)
    run_dir = ws/'runs'/'p1'
    m = read_json(run_dir/'metrics.json')
    frozen = read_json(run_dir/'checkpoint.json')['state']['structural']
    assert ((frozen['config']['min_ladder_units'], frozen['config']['epochs'], frozen['config']['batch']['batch_size'])
            == (8, 2, 8))
    assert frozen['skill_mode'] == 'auto' and 'train.min_ladder_units' in text_of(train)  # the resolved config is shown
    assert read_json(run_dir/'checkpoint.json')['state']['phase'] == 'done'
    assert m['run_id'] == 'p1' and len(m['epochs']) >= 1 and m['steps'] >= 1
    assert m['test']['n'] > 0 and 0 <= m['test']['delivered_accuracy'] <= 1
    assert set(m['forecast']['roles']) == {'agent', 'judge', 'evolver'} and m['actual']['agent']['calls'] > 0
    assert set(m['confirmed_rules']) == {'helpful', 'neutral', 'trap', 'unknown'}
    assert [r['task_type'] for r in m['power']] == m['gated_task_types']  # one power row per gated type
    assert all(r['alpha'] == frozen['gate_params']['alpha'] and r['evidence_cap'] >= r['ladder'] for r in m['power'])
    assert all(r['discordance_source'].startswith('measured') for r in m['power'])
    # the best version is delivered; every version after the seed records its lineage
    store = VersionStore(ws, 'skills')
    assert load_manifest(ws).skills_current == m['best_version'] and m['best_version'] in store.versions()
    assert all(store.read_meta(v)['parent'] for v in store.versions()[1:])
    # figures under the run, reports inline in the output notebook
    figures = {p.suffix for p in (run_dir/'figures').iterdir()}
    assert {'.pdf', '.png', '.svg'} <= figures
    out = text_of(train)
    assert 'image/png' in out and 'text/html' in out
    for shown in ('forecast', 'min_edit_points', 'final report', 'paired_comparison', 'decision_log',
                  'confirmed acceptances by rule kind', 'tokens_per_answer', 'wall_s'):
        assert shown in out, shown

    # the same call again reports the finished run without retraining it
    again = run('train.ipynb', tmp_path/'again.ipynb', run_id='p1', workspace=str(ws), data_dir=str(world),
                config=str(cfg), epochs=2, concurrency=4)
    assert read_json(run_dir/'metrics.json') == m and 'final report' in text_of(again)

    ev = run('eval.ipynb', tmp_path/'eval.ipynb', workspace=str(ws), data_dir=str(world), skills_version='best',
             pool='test', concurrency=4)
    out = text_of(ev)
    assert 'p_mcnemar' in out and 'ci_low' in out and 'image/png' in out
    assert 'tokens_per_answer' in out  # what the evaluation spent
    assert {p.suffix for p in (ws/'figures').glob(f'accuracy_test_{m["best_version"]}.*')} == {'.pdf', '.png', '.svg'}
