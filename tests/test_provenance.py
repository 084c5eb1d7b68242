"""Provenance in the export (issue 32, item 7) and the training bar's total (item 9): `Runner.export` writes
`provenance.json` (code, packages, role endpoints without keys, config, world, test-pool looks) and puts the tables
in `tables/`, every file in the manifest; the training bar knows its planned steps (or its call budget)."""
import asyncio, base64, json

import polars as pl
import pytest
import tqdm.auto

import treetrm
from treetrm.core import canonical_json, package_dir, read_json, sha256_file
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world

CANARY = 'CANARYpr0v3n4nc3k3y'  # not key-shaped: only keeping keys out, not redaction by pattern, hides it
ROLES = ('agent', 'judge', 'evolver')
SMALL_SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
SMALL = dict(epochs=1, min_ladder_units=8, batch=dict(batch_size=8, min_class=2, correct_ratio=0.2))


def small_runner(root, **kw) -> Runner:
    "A runner on the small world under `root` (the world made once)."
    world = root/'world' if (root/'world').exists() else make_world(root/'world', seed=1, n_videos=12)
    return Runner(root/'ws', data_dir=world, split_config=SMALL_SPLIT, config=SMALL, concurrency=4, progress=False,
                  **kw)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "A finished one-epoch training run 't1' on a 12-video sim world."
    root = tmp_path_factory.mktemp('prov')
    runner = small_runner(root)
    return runner, asyncio.run(runner.train('t1'))


def files_of(folder) -> dict:
    "Relative path -> bytes of every file under `folder`."
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob('*') if p.is_file()}


def test_export_writes_provenance_and_tables(trained, tmp_path):
    runner, res = trained
    art = runner.export('t1', tmp_path/'artifact')
    prov = read_json(art/'provenance.json')
    assert prov['treetrm'] == treetrm.__version__ and prov['python'].count('.') == 2
    assert {'openai', 'gepa', 'polars', 'numpy', 'scipy', 'bm25s', 'json-repair'} <= prov['packages'].keys()
    if (package_dir().parent/'.git').exists():
        assert len(prov['git']['commit']) == 40 and isinstance(prov['git']['dirty'], bool)
    assert prov['roles'] == {r: dict(model=runner.providers[r].model, base_url_host=None, provider_kind='sim')
                             for r in ROLES}
    assert prov['config'] == read_json(art/'config.json') == json.loads(canonical_json(res.state.structural))
    assert prov['world_sha256'] == sha256_file(runner.data_dir/'world.json')
    assert prov['test_looks'] == 1 and prov['test_look_runs'] == [f'{res.internal_run_id}_final_test']
    # the tables beside the figures, and every file in the manifest with its hash
    assert len(pl.read_csv(art/'tables'/'decisions.csv')) == len(res.state.decisions)
    assert (art/'tables'/'final_paired_comparison.csv').exists() and not list((art/'figures').glob('*.csv'))
    listed = read_json(art/'manifest.json')['files']
    files = files_of(art)
    assert sorted(listed) == sorted(set(files) - {'manifest.json'})
    assert all(sha256_file(art/k) == h for k, h in listed.items())


def test_every_look_at_the_test_pool_is_counted(trained):
    runner, _ = trained
    before = runner.test_looks()['run_id'].to_list()
    asyncio.run(runner.eval('seed', 'validation', run_id='val_look'))  # not the test pool
    assert runner.test_looks()['run_id'].to_list() == before
    asyncio.run(runner.eval('seed', 'test', run_id='test_look'))
    assert runner.test_looks()['run_id'].to_list() == before + ['test_look']


def test_no_api_key_reaches_the_artifact(trained, tmp_path, monkeypatch):
    "The same workspace under backend 'openai' with every role's key set: the roles' endpoints are in, no key is."
    runner, _ = trained
    for role in ROLES + ('vision',):
        monkeypatch.setenv(f'TREETRM_{role.upper()}_MODEL', f'model-{role}')
        monkeypatch.setenv(f'TREETRM_{role.upper()}_BASE_URL', f'https://u:{CANARY}@{role}.example.org:8443/v1')
        monkeypatch.setenv(f'TREETRM_{role.upper()}_API_KEY', CANARY)
    remote = Runner(runner.workspace, backend='openai', data_dir=runner.data_dir, split_config=SMALL_SPLIT,
                    config=SMALL, progress=False)
    art = remote.export('t1', tmp_path/'artifact')
    prov = read_json(art/'provenance.json')
    assert prov['roles']['agent'] == dict(model='model-agent', base_url_host='agent.example.org:8443',
                                          provider_kind='openai')
    assert prov['world_sha256'] is None  # the world is the sim's only
    forms = [CANARY.encode(), base64.b64encode(CANARY.encode())]
    assert [k for k, data in files_of(art).items() if any(f in data for f in forms)] == []


def test_git_state_is_none_without_a_checkout_or_git(tmp_path, monkeypatch):
    from treetrm.train.provenance import git_state
    assert git_state(tmp_path) is None
    monkeypatch.setenv('PATH', str(tmp_path))  # no git on the path
    assert git_state(package_dir().parent) is None


class Bar(tqdm.auto.tqdm):
    "A tqdm that remembers the training bars made."
    made = []
    def __init__(self, *args, **kw):
        if str(kw.get('desc', '')).startswith('train'): Bar.made.append(kw)
        super().__init__(*args, **{**kw, 'disable': True})


@pytest.mark.parametrize('settings, unit', [({}, 'step'), ({'max_calls': 300}, 'call')])
def test_training_bar_has_a_total(trained, monkeypatch, settings, unit):
    runner, _ = trained
    monkeypatch.setattr(tqdm.auto, 'tqdm', Bar)
    bar_runner = small_runner(runner.workspace.parent)
    bar_runner.progress = True
    Bar.made.clear()
    res = asyncio.run(bar_runner.train(f'bar_{unit}', **settings))
    (bar, ) = Bar.made
    assert bar['unit'] == unit
    assert bar['total'] == (300 if settings else SMALL['epochs'] * len(res.state.batches))
