("The scale benchmark notebook runs under papermill on a small setting: "
 "every grid run gives the same summary whichever executor and cores ran it, "
 "every question of every endpoint run is answered with none lost (one server killed part-way included), "
 "and its figures are self-consistent. How fast anything went belongs to the JSON, not to this test.")
import json
from pathlib import Path

import papermill as pm
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scale_notebook(tmp_path):
    out = tmp_path/'scale.json'
    params = dict(grids=['reduced'], seeds=[0], rules=['gate'], cores=[1, 2], servers=[1, 2], n_questions=40,
                  kill_at=0.3, out=str(out))  # one rule: the executors' equality needs no second
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'scale.ipynb'), str(tmp_path/'scale_out.ipynb'), kernel_name='python3',
                        parameters=params, cwd=str(ROOT/'nbs'), progress_bar=False)
    s = json.loads(out.read_text())
    runs = s['grids']['reduced']['runs']
    assert {(r['executor'], r['processes']) for r in runs} == {(e, p) for e in ('processes', 'ray') for p in (1, 2)}
    assert all(r['identical'] for r in runs)  # the same summary from every executor and number of cores
    assert all(r['jobs'] == 1 for r in runs)  # 1 cell x 1 seed
    e = s['endpoints']
    for name, r in [*e['runs'].items(), ('killed', e['killed'])]:
        assert (r['answered'], r['infra_stops']) == (40, 0), name  # nothing lost
        assert sum(c.get('ok', 0) for c in r['by_endpoint'].values()) == r['requests_ok'], name
    assert len(e['runs']['2']['by_endpoint']) == 2 and all(c['ok'] > 0 for c in e['runs']['2']['by_endpoint'].values())
    killed = [c for c in e['killed']['by_endpoint'].values() if c.get('error')]
    assert len(killed) == 1  # the killed server's calls failed and went over to the other
    one = e['runs']['1']['requests_per_s']
    assert abs(e['runs']['2']['linear_ratio'] - e['runs']['2']['requests_per_s'] / (2 * one)) < 1e-2
    assert s['projection']['grid']['jobs'] == 120 and s['projection']['grid']['hours'] > 0
    assert sorted(s['figures']) == ['scale.pdf', 'scale.png', 'scale.svg'] and (tmp_path/'scale.png').exists()
