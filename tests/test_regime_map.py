"""The regime map's benchmark notebook (issue 47) runs through papermill on a registration of one small cell: it trains
the registered rules on the tuning seed, writes the map's JSON with its provenance, and draws the figure."""
import json, subprocess, sys
from pathlib import Path
import pytest
from treetrm.core import atomic_write_json, read_json
from treetrm.bench.regime_map import preregistration, map_bar, run_map

ROOT = Path(__file__).resolve().parents[1]


def tiny_registration(path: Path) -> Path:
    reg = {k: v for k, v in preregistration().items() if k not in ('sha256', 'path')}
    reg |= dict(tuning_seeds=[100], report_seeds=[4701], rules=['gate', 'greedy', 'oracle'],
                map=dict(regimes=['greedy'], mixtures=['balanced'], sizes=[60]),
                bar=reg['bar'] | dict(practical=['greedy'], slices=[['greedy', 60]]))
    atomic_write_json(path, reg)
    return path


def test_the_map_notebook_writes_its_json_and_figure(tmp_path):
    reg = tiny_registration(tmp_path/'reg.json')
    out = tmp_path/'map.json'
    subprocess.run([sys.executable, '-m', 'papermill', str(ROOT/'nbs/bench/regime_map.ipynb'), str(tmp_path/'o.ipynb'),
                    '-k', 'python3', '-p', 'registration', str(reg), '-p', 'processes', '1', '-p', 'workdir',
                    str(tmp_path/'work'), '-p', 'out', str(out), '-p', 'figure_dir', str(tmp_path)],
                   check=True, cwd=ROOT, capture_output=True)
    m = read_json(out)
    assert m['kind'] == 'tuning' and m['seeds'] == [100]
    assert m['preregistration']['sha256'] == preregistration(reg)['sha256']
    assert m['code']['commit'] and len(m['cells']) == 1
    cell = m['cells'][0]
    assert (cell['regime'], cell['mixture'], cell['size']) == ('greedy', 'balanced', '60')
    assert set(cell['rules']) == {'gate', 'greedy', 'oracle'}
    assert cell['world']['realism']['decoding'] == 'greedy'
    assert (tmp_path/'map.png').exists()
    bar = map_bar(m, preregistration(reg)['bar'])
    assert bar[0]['best_practical'] == 'greedy' and bar[0]['runs'] == 1


def test_report_seeds_are_only_the_registered_ones():
    import asyncio
    with pytest.raises(Exception, match='not registered report seeds'):
        asyncio.run(run_map('report', seeds=[100]))
    with pytest.raises(Exception, match='unknown seed kind'):
        asyncio.run(run_map('held-out'))


REPORT = ROOT/'nbs/bench/results/map-report-2026-12-07.json'


def test_the_committed_report_json_answers_the_registration():
    ("The committed report map ran only registered report seeds, of the committed registration (the benchmark page's "
     "tables are `map_markdown` of it, made at docs build time).")
    m = read_json(REPORT)
    reg = preregistration()
    assert m['kind'] == 'report' and set(m['seeds']) <= set(reg['report_seeds'])
    assert m['preregistration']['sha256'] == reg['sha256']  # the registration it answers is the committed one
