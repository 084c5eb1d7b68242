("Report: byte-stable figures across processes, coverage of the video-clustered interval, "
 "shadow rows in the gate table, inline figures under papermill.")
import dataclasses, hashlib, os, subprocess, sys, textwrap
from pathlib import Path
import numpy as np
import polars as pl
import pytest
import treetrm.log as log_mod
from treetrm.log import HarnessLog
from treetrm.figures import FIGURE_FORMATS, MAGIC, save_figure
from treetrm.intervals import clustered_mean
from treetrm.report import gate_table, plot_e_values, shadow_columns

ROOT = Path(__file__).resolve().parents[1]

# One fixed figure, built the same way in every process: an e-value plot from a hand-written trajectory.
FIGURE_SCRIPT = textwrap.dedent('''
    import sys, polars as pl
    from treetrm.figures import save_figure
    from treetrm.report import plot_e_values
    traj = pl.DataFrame(dict(task_type=['Counting Problem'] * 4 + ['Temporal Reasoning'] * 3,
                             n_used=[1, 2, 3, 4, 1, 2, 3], e_value=[2.0, 4.0, 8.0, 24.0, 0.5, 0.3, 0.2],
                             decision=['continue'] * 3 + ['accept_confirmed', 'continue', 'continue',
                                                          'reject_inertia']))
    save_figure(plot_e_values(traj, title='byte stability'), 'e_values', sys.argv[1])
''')

def _render(out_dir:Path, epoch:str, script:str=FIGURE_SCRIPT) -> dict:
    "Run `script` in a fresh interpreter with SOURCE_DATE_EPOCH=epoch; sha256 of each file it wrote."
    env = {**os.environ, 'SOURCE_DATE_EPOCH': epoch}
    env.pop('MPLBACKEND', None)
    subprocess.run([sys.executable, '-c', script, str(out_dir)], check=True, env=env, cwd=ROOT, timeout=120)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out_dir.iterdir())}

@pytest.mark.slow
def test_save_figure_is_byte_stable_across_processes(tmp_path):
    # Different SOURCE_DATE_EPOCH values: matplotlib would write them as the file date if the metadata were not fixed.
    a, b = _render(tmp_path/'a', '1000000000'), _render(tmp_path/'b', '1700000000')
    assert sorted(a) == [f'e_values.{f}' for f in sorted(FIGURE_FORMATS)]
    assert a == b
    for f in FIGURE_FORMATS:
        data = (tmp_path/'a'/f'e_values.{f}').read_bytes()
        assert data.startswith(MAGIC[f]), f
    assert b'IEND' in (tmp_path/'a'/'e_values.png').read_bytes()[-12:]  # a complete PNG
    assert (tmp_path/'a'/'e_values.pdf').read_bytes().rstrip().endswith(b'%%EOF')
    assert (tmp_path/'a'/'e_values.svg').read_bytes().rstrip().endswith(b'</svg>')

@pytest.mark.slow
def test_default_savefig_would_not_be_stable(tmp_path):
    "The control: plain savefig under two SOURCE_DATE_EPOCH values gives different PDFs, so the test above can fail."
    plain = FIGURE_SCRIPT.replace("save_figure(plot_e_values(traj, title='byte stability'), 'e_values', sys.argv[1])",
                                  "plot_e_values(traj).savefig(sys.argv[1] + '/plain.pdf')")
    (tmp_path/'a').mkdir()
    (tmp_path/'b').mkdir()
    assert _render(tmp_path/'a', '1000000000', plain) != _render(tmp_path/'b', '1700000000', plain)

def _coverage(n_videos, per_video, p, icc, reps, seed):
    "Share of simulated video-clustered benchmarks whose clustered 95% interval covers the true accuracy."
    rng = np.random.default_rng(seed)
    s = (1 - icc)/icc
    pv = rng.beta(p*s, (1 - p)*s, size=(reps, n_videos))
    y = (rng.random((reps, n_videos, per_video)) < pv[..., None]).astype(float)
    vids = np.repeat(np.arange(n_videos), per_video)
    return np.mean([(r := clustered_mean(y[k].ravel(), vids)).low <= p <= r.high for k in range(reps)])

@pytest.mark.parametrize('n_videos,per_video,p,icc', [(40, 3, 0.6, 0.3), (60, 4, 0.45, 0.5), (30, 2, 0.7, 0.1)])
def test_clustered_interval_coverage(n_videos, per_video, p, icc):
    # 3000 reps: Monte Carlo se of a true 95% coverage is 0.004, so the band [0.925, 0.97] allows ~5 se below and
    # ~5 se above; the CR1 + t(G-1) interval sits slightly below nominal with few clusters, never far.
    cov = _coverage(n_videos, per_video, p, icc, reps=3000, seed=n_videos)
    assert 0.925 <= cov <= 0.97, cov

def test_clustered_interval_beats_naive_under_clustering():
    rng = np.random.default_rng(1)
    pv = rng.beta(0.6*2, 0.4*2, size=(3000, 40))  # icc = 1/3
    y = (rng.random((3000, 40, 3)) < pv[..., None]).astype(float).reshape(3000, -1)
    ph = y.mean(1)
    naive = np.mean(np.abs(ph - 0.6) <= 1.96*np.sqrt(ph*(1 - ph)/120))
    assert naive < 0.9 and _coverage(40, 3, 0.6, 1/3, reps=3000, seed=1) > 0.93

@pytest.fixture
def log(tmp_path):
    with HarnessLog(tmp_path/'harness.db') as lg: yield lg

def _evidence(gate, tt, n, w, l, decision):
    return dict(run_id='train', gate_id=gate, task_type=tt, unit_id=f'{gate}-{tt}-{n}', rank=n - 1, base_correct=False,
                cand_correct=True, w=w, l=l, n_used=n, e_value=1.0, e_value_harm=1.0, decision=decision)

def test_gate_table_reflects_shadow_rows_exactly(log):
    types = ['Counting Problem', 'Temporal Reasoning', 'OCR Problems']
    log.insert('gate_evidence', [_evidence(g, tt, 5, 3, 1, 'accept_provisional') for g in ('s1', 's2') for tt in types])
    rng = np.random.default_rng(7)
    shadows = [dict(run_id='train', gate_id=g, task_type=tt, rule=r,
                    decision=str(rng.choice(['accept', 'reject', 'unavailable'])), n_used=int(rng.integers(1, 9)),
                    detail={'i': i})
               for i, (g, tt, r) in enumerate((g, tt, r) for g in ('s1', 's2') for tt in types
                                              for r in ('gepa_first3', 'mcnemar_fixed_n', 'mcnemar_peek'))]
    # one missing
    shadows = [s for s in shadows
               if not (s['gate_id'] == 's2' and s['task_type'] == 'OCR Problems' and s['rule'] == 'mcnemar_peek')]
    assert log.insert('shadow_gate', shadows) == len(shadows)
    gt = gate_table(log, 'train')
    assert gt.height == 6
    assert [c for c in gt.columns if c.startswith('shadow_')] == ['shadow_gepa_first3', 'shadow_mcnemar_fixed_n',
                                                                  'shadow_mcnemar_peek']
    cells = {(r['gate_id'], r['task_type'], c.removeprefix('shadow_')): r[c] for r in gt.iter_rows(named=True)
             for c in gt.columns if c.startswith('shadow_')}
    # an unavailable decision says so with the units the rule had (no `n_first`/`cap` in these details)
    shown = lambda s: s['decision'] if s['decision'] != 'unavailable' else \
        f"unavailable: the gate stopped after {s['n_used']} units"
    expected = {(s['gate_id'], s['task_type'], s['rule']): shown(s) for s in shadows}
    assert {k: v for k, v in cells.items() if v is not None} == expected
    assert cells[('s2', 'OCR Problems', 'mcnemar_peek')] is None  # no row -> no decision, not a made-up one
    assert gate_table(log, 'train', 's1').height == 3 and set(gate_table(log, 'train', 's1')['gate_id']) == {'s1'}

def test_gate_table_keeps_shadow_only_rows_and_has_no_shadow_columns_without_shadows(log):
    log.insert('gate_evidence', [_evidence('s1', 'Counting Problem', 3, 2, 0, 'continue')])
    assert [c for c in gate_table(log, 'train').columns if c.startswith('shadow_')] == []
    log.insert('shadow_gate', [dict(run_id='train', gate_id='s1', task_type='Action Reasoning', rule='gepa_first3',
                                    decision='reject', n_used=3)])
    gt = gate_table(log, 'train')
    assert gt.filter(pl.col('task_type') == 'Action Reasoning')['shadow_gepa_first3'].to_list() == ['reject']
    assert shadow_columns(log, 'train').height == 1

PAPERMILL_NB = [
    "import polars as pl\nfrom treetrm.report import plot_e_values, show_report",
    "traj = pl.DataFrame(dict(task_type=['t'] * 3, n_used=[1, 2, 3], e_value=[1.5, 3.0, 30.0], decision=['continue', "
    "'continue', 'accept_confirmed']))\n"
    "show_report({'table': traj, 'e_values': plot_e_values(traj)}, title='inline check')",
]

def test_show_report_figures_appear_in_papermill_output(tmp_path):
    pm, nbformat = pytest.importorskip('papermill'), pytest.importorskip('nbformat')
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in PAPERMILL_NB]
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'python3', 'language': 'python'}
    nbformat.write(nb, tmp_path/'in.ipynb')
    os.environ.pop('MPLBACKEND', None)
    out = pm.execute_notebook(str(tmp_path/'in.ipynb'), str(tmp_path/'out.ipynb'), kernel_name='python3',
                              cwd=str(tmp_path), progress_bar=False)
    outputs = out.cells[1].outputs
    pngs = [o for o in outputs if 'image/png' in o.get('data', {})]
    # once: displayed, then closed, not re-drawn at cell end
    assert len(pngs) == 1, [list(o.get('data', {})) for o in outputs]
    assert any('text/html' in o.get('data', {}) for o in outputs)  # the polars table
    assert any('inline check' in o.get('data', {}).get('text/markdown', '') for o in outputs)
