"The gate benchmark notebook runs under papermill with injected parameters and writes its JSON and figures."
import json
from pathlib import Path
import papermill as pm

ROOT = Path(__file__).resolve().parents[1]

def test_bench_gate_notebook(tmp_path):
    out = tmp_path/'bench'/'gate.json'
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'gate.ipynb'), str(tmp_path/'gate_out.ipynb'), kernel_name='python3',
                        parameters=dict(n_ladders=1500, seed=3, out=str(out)), cwd=str(ROOT), progress_bar=False)
    s = json.loads(out.read_text())
    assert {'headline', 'null', 'savings', 'power_curve', 'ville_worst_case_240', 'reference', 'params', 'figures'} <= set(s)
    assert s['n_ladders'] == 1500 and s['seed'] == 3 and s['params']['alpha'] == 0.05
    for f in s['figures']: assert (out.parent/f).stat().st_size > 10_000
    h = s['headline']
    assert h['fixed_n80'] == 134                                        # exact, no Monte Carlo
    assert abs(h['gate']['accept_confirmed']['rate'] - 0.851) < 0.06   # reference 85.1%, n = 1500
    assert 20 <= h['gate']['median_units'] < h['fixed_n80'] < 240
    assert abs(h['exact']['accept_confirmed'] - 0.851) < 0.005
    for d in ('d0.2', 'd0.4'):
        null = s['null'][d]
        assert null['gate']['accept_confirmed']['rate'] < null['peek']['accept']['rate']
        assert null['exact']['accept_confirmed'] <= 0.05
    assert s['null']['d0.2']['peek']['accept']['rate'] > 0.10
    assert set(s['savings']) == {'+10->+15', '+5->+10', '+5->+15'}
    assert all(0.4 < v['saving'] < 0.95 for v in s['savings'].values())
    assert s['ville_worst_case_240'] <= 0.05
    gains = [r['gain'] for r in s['power_curve']]
    assert gains == sorted(gains) and 0.0 in gains and 0.10 in gains
    confirmed = [r['gate_confirmed'] for r in s['power_curve']]
    assert confirmed[-1] > 0.95 and confirmed[0] < 0.05
