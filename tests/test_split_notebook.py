("The split stage notebook runs through papermill on a small sim world and writes checked, "
 "reproducible pools into its workspace.")
import json

import papermill as pm
import pytest

from treetrm.core import ConfigError, project_root, read_json, sha256_file
from treetrm.sim.world import make_world
from treetrm.llm.backends import make_providers
from treetrm.split.by_video import POOLS
from treetrm.split.stage import load_split

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = project_root()
NB = ROOT/'nbs'/'split.ipynb'


def sim_agent_available() -> bool:
    try:
        make_providers('sim', roles=('agent',))
        return True
    except ConfigError: return False


def params(ws, world, **kw):
    return dict(workspace=str(ws), data_dir=str(world), seed=0, test_ratio=0.3, epsilon=0.2, report_floor=10,
                floor_k={'Counting Problem': 1}, val_ratio=0.4, val_wrong_min=2, concurrency=4, backend='sim', **kw)


def run(tmp_path, name, **p):
    out = tmp_path/f'{name}.ipynb'
    pm.execute_notebook(str(NB), str(out), parameters=p, kernel_name='python3', cwd=str(ROOT/'nbs'), progress_bar=False)
    return json.loads(out.read_text())


def test_notebook_is_committed_clean():
    nb = json.loads(NB.read_text())
    assert nb['cells'][0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(nb['cells'][0]['source'])
    assert any('parameters' in c.get('metadata', {}).get('tags', []) for c in nb['cells'])
    assert all(not c.get('outputs') and not c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code')


@pytest.mark.skipif(not sim_agent_available(), reason='the simulated agent (sim-agent) is not registered yet')
def test_split_notebook_writes_pools(tmp_path):
    world = make_world(tmp_path/'world', seed=2, n_videos=8)
    nb = run(tmp_path, 'out', **params(tmp_path/'ws', world))
    pools = tmp_path/'ws'/'pools'
    manifest = read_json(pools/'split_manifest.json')
    assert manifest['pools_sha256'] == sha256_file(pools/'pools.json')
    split = load_split(pools)
    assert sum(len(split.questions(p)) for p in POOLS) == len((world/'questions.jsonl').read_text().splitlines())
    assert (tmp_path/'ws'/'harness.db').exists()
    outputs = [o for c in nb['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    assert any('image/png' in o.get('data', {}) for o in outputs), 'the pool figure is shown inline'
    assert any('text/html' in o.get('data', {}) for o in outputs), 'the polars tables are shown inline'
    # a second run in a fresh workspace gives the same bytes; a dry run writes nothing
    run(tmp_path, 'again', **params(tmp_path/'ws2', world))
    assert (pools/'pools.json').read_bytes() == (tmp_path/'ws2'/'pools'/'pools.json').read_bytes()
    dry = run(tmp_path, 'dry', **params(tmp_path/'ws3', world, dry_run=True))
    assert not (tmp_path/'ws3').exists()  # a dry run writes nothing: no pools, no harness.db, no workspace
    assert 'split plan' in json.dumps(dry['cells'])
