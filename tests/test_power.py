"The smallest confirmable edit (`gate.power.min_confirmable_edit`) against the gate run along simulated ladders."
import asyncio, math
from dataclasses import replace
import numpy as np
import pytest
from treetrm.core import ConfigError
from treetrm.gate.decision import RULE_DECISIONS
from treetrm.gate.planning import min_effect_q_for
from treetrm.gate.power import POWER, min_confirmable_edit, power_table
from treetrm.gate.simulate import gate_paths
from treetrm.train.settings import DEFAULT_GATE

N = 4000  # ladders per simulated rate
SE = math.sqrt(POWER * (1 - POWER) / N)  # the rate's standard error at the 0.80 line: 0.0063
TOL = 4 * SE  # a correct statement fails this by chance with probability ~3e-5

def run_gate(n_units:int):
    "A training run's gate for a type with `n_units` units: calibrated to its cap, futility from a cold ladder (4/9)."
    p = replace(DEFAULT_GATE, evidence_cap=n_units)
    return replace(p, min_effect_q=min_effect_q_for(p, n_units, 4 / 9, ladder=n_units))

def simulated_confirm_rate(n_units:int, noise:float, points:float, params, seed:int) -> float:
    "Share of N ladders the gate confirms, each unit drawn from the edit model itself (not through q_for_gain)."
    delta, u = points / 100, np.random.default_rng(seed).random((N, n_units))
    outcomes = np.where(u < noise / 2 + delta, 1, np.where(u < noise + delta, -1, 0)).astype(np.int8)
    exits, _ = gate_paths(outcomes, params)
    return float((np.array(RULE_DECISIONS)[exits] == 'accept_confirmed').mean())

SLOW = pytest.mark.slow  # 300 units: ~5 s each on 2 cores
@pytest.mark.parametrize('n_units,noise', [(60, 0.05), (60, 0.30), pytest.param(300, 0.05, marks=SLOW),
                                           pytest.param(300, 0.30, marks=SLOW)])
def test_min_edit_is_confirmed_four_times_in_five(n_units, noise):
    params = run_gate(n_units)
    points = min_confirmable_edit(n_units, noise, params)
    assert points is not None and 0 < points < 100 * (1 - noise)
    at_min = simulated_confirm_rate(n_units, noise, points, params, seed=n_units)
    smaller = simulated_confirm_rate(n_units, noise, 0.7 * points, params, seed=n_units + 1)
    assert at_min >= POWER - TOL, (points, at_min)
    assert smaller < POWER, (points, smaller)  # the statement is the smallest: a clearly smaller edit falls short
    # (an edit stated 15% too small is confirmed ~0.71 of the time here: the first assert catches it)

@pytest.mark.slow
def test_more_units_and_less_noise_confirm_smaller_edits():
    small, large = run_gate(60), run_gate(300)
    assert min_confirmable_edit(300, 0.30, large) < min_confirmable_edit(60, 0.30, small)
    assert min_confirmable_edit(60, 0.05, small) < min_confirmable_edit(60, 0.30, small)

def test_a_tiny_pool_says_it_cannot_confirm():
    tab = power_table([dict(task_type='t', units=4, videos=2, ladder=4, discordance=0.3, source='measured',
                            params=run_gate(4))])
    assert tab['min_edit_points'][0] is None
    assert tab['warning'][0].startswith('no edit can be confirmed with 80% chance on 4 units')

@pytest.mark.parametrize('kw,field', [(dict(n_units=0), 'n_units'), (dict(n_units=2.5), 'n_units'),
                                      (dict(discordance=-0.1), 'discordance'), (dict(discordance=1.0), 'discordance'),
                                      (dict(power=1.5), 'power')])
def test_bad_input_names_the_field(kw, field):
    args = dict(n_units=60, discordance=0.3, params=run_gate(60)) | kw
    with pytest.raises(ConfigError, match=field): min_confirmable_edit(**args)


# --- the statement in the split stage's report (offline, on the sim backend) ----------------------------------------

SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)

@pytest.mark.slow  # a split on a 16-video sim world: ~6 s
def test_split_measures_discordance_and_states_power(tmp_path, capsys):
    from treetrm.gate.power import POWER_COLUMNS
    from treetrm.sim.world import make_world
    from treetrm.split.stage import read_discordance, show_split
    from treetrm.train.runner import Runner
    world = make_world(tmp_path/'world', seed=1, n_videos=16)
    runner = Runner(tmp_path/'ws', backend='sim', data_dir=world, config={'min_ladder_units': 8}, split_config=SPLIT,
                    concurrency=4, progress=False)
    split = asyncio.run(runner.split(redraw_questions=12))
    doc = read_discordance(runner.workspace)
    assert doc['questions'] >= 12 and doc['run_id'] == 'baseline-redraw' and doc['temperature'] == 0.0
    assert 0 < doc['pooled']['units'] <= doc['questions']  # whole units, answered on both draws
    assert sum(c['discordant'] for c in doc['per_type'].values()) == doc['pooled']['discordant']
    tab = runner.power_statement()
    assert tab.columns == list(POWER_COLUMNS) and tab.height >= 1
    assert set(tab['task_type']) <= {u for u in split.frame()['task_type']}
    assert (tab['alpha'] == runner.config.gate.alpha).all()  # at the run's alpha
    assert tab['discordance_source'][0].startswith('measured')  # measured, not the 2p(1-p) fallback
    show_split(split, power=tab, discordance=doc)
    out = capsys.readouterr().out
    assert 'asked twice' in out and 'A second draw of the baseline gives a floor' in out and 'min_edit_points' in out

@pytest.mark.slow
def test_no_redraw_falls_back_and_says_so(tmp_path):
    from treetrm.sim.world import make_world
    from treetrm.split.stage import read_discordance
    from treetrm.train.runner import Runner
    world = make_world(tmp_path/'world', seed=1, n_videos=16)
    runner = Runner(tmp_path/'ws', backend='sim', data_dir=world, config={'min_ladder_units': 8}, split_config=SPLIT,
                    concurrency=4, progress=False)
    asyncio.run(runner.split(redraw_questions=0))
    assert read_discordance(runner.workspace) is None
    assert runner.power_statement()['discordance_source'].str.starts_with('not measured').all()

def test_bad_redraw_questions_is_refused_before_anything_runs(tmp_path):
    from treetrm.sim.world import make_world
    from treetrm.train.runner import Runner
    world = make_world(tmp_path/'world', seed=1, n_videos=16)
    runner = Runner(tmp_path/'ws', backend='sim', data_dir=world, split_config=SPLIT, progress=False)
    with pytest.raises(ConfigError, match='redraw_questions'): asyncio.run(runner.split(redraw_questions=-1))
    assert not (tmp_path/'ws'/'pools').exists()
