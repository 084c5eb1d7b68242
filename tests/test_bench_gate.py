"The gate benchmark notebook runs under papermill with injected parameters and writes its JSON and figures."
import json, math
from pathlib import Path
import papermill as pm
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = Path(__file__).resolve().parents[1]

def test_bench_gate_notebook(tmp_path):
    out = tmp_path/'bench'/'gate.json'
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'gate.ipynb'), str(tmp_path/'gate_out.ipynb'), kernel_name='python3',
                        parameters=dict(n_ladders=1500, seed=3, out=str(out)), cwd=str(ROOT), progress_bar=False)
    s = json.loads(out.read_text())
    assert ({'headline', 'null', 'savings', 'power_curve', 'ville_worst_case_240', 'reference', 'params', 'figures'}
            <= set(s))
    assert s['n_ladders'] == 1500 and s['seed'] == 3 and s['params']['alpha'] == 0.05
    for f in s['figures']: assert (out.parent/f).stat().st_size > 10_000
    h, ref, n = s['headline'], s['reference'], s['n_ladders']
    assert h['fixed_n80'] == ref['headline']['fixed_n80']              # exact, no Monte Carlo
    # the notebook's exact DP is REFERENCE's figure (written to 3 digits; test_gate_simulation.py recomputes it)
    assert round(h['exact']['accept_confirmed'], 3) == ref['headline']['confirmed']
    p = h['exact']['accept_confirmed']
    assert abs(h['gate']['accept_confirmed']['rate'] - p) <= 4*math.sqrt(p*(1 - p)/n)   # 4 binomial SE of n ladders
    assert 20 <= h['gate']['median_units'] < h['fixed_n80'] < 240
    for d in ('d0.2', 'd0.4'):
        null = s['null'][d]
        assert null['gate']['accept_confirmed']['rate'] < null['peek']['accept']['rate']
        assert null['exact']['accept_confirmed'] <= 0.05
    assert s['null']['d0.2']['peek']['accept']['rate'] > 0.10
    assert set(s['savings']) == {'+10->+15', '+5->+10', '+5->+15'}
    for key, v in s['savings'].items():
        assert v['fixed_n'] == ref['savings'][key]['fixed_n'] and v['gate_cap'] == 2*v['fixed_n']
        exact = 1 - ref['savings'][key]['gate_mean_units']/v['fixed_n']   # the exact mean, written to 0.1 unit
        # 4 Monte Carlo SE of the mean units over n ladders, plus the 0.05 units the reference may be rounded by
        assert abs(v['saving'] - exact) <= 4*v['saving_se'] + 0.05/v['fixed_n'], (key, v, exact)
    assert s['ville_worst_case_240'] <= 0.05 and round(s['ville_worst_case_240'], 4) == ref['ville_worst_case_240']
    gains = [r['gain'] for r in s['power_curve']]
    assert gains == sorted(gains) and 0.0 in gains and 0.10 in gains
    confirmed = [r['gate_confirmed'] for r in s['power_curve']]
    assert confirmed[-1] > 0.95 and confirmed[0] < 0.05
