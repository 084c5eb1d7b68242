"""What a newcomer tripped on (issue 51), the figures and tables: the decision timeline counted only gated steps
(item 8), the split's figure and tables had an unlabelled axis, difficulty out of order and unexplained signal labels
(item 9), the accuracy curves had no start point, an undefined "R", a best line past the data and a final figure that
copied the last epoch's (item 10), the loop benchmark's figures were unreadable at paper size and its verdict table
was strings (item 11), and the artifact's figures depended on `show` (item 15)."""
import asyncio, contextlib, io, shutil, time

import matplotlib
import numpy as np
import polars as pl
import pytest

matplotlib.use('Agg')

from treetrm import report
from treetrm.figures import freeze_layout
from treetrm.log import HarnessLog, TrainRunId


def outside(box, others) -> bool:
    "Whether the display box `box` overlaps none of `others`."
    return not any(box.overlaps(o) for o in others)


# item 8: the timeline's x axis was "gate (training step)", the count of gated steps (its "4" was the 5th step)
def gate_rows(gate_id:str, task_type:str, decision:str, n:int=4) -> list[dict]:
    "gate_evidence rows of one gate that decides `decision` after `n` units (W every unit)."
    return [dict(run_id='train', gate_id=gate_id, task_type=task_type, unit_id=f'{gate_id}-{task_type}-{k}', rank=k,
                 base_correct=False, cand_correct=True, w=k + 1, l=0, n_used=k + 1, e_value=2.0 ** (k + 1),
                 e_value_harm=0.5, decision=decision if k == n - 1 else 'continue', created_at=f'2025-01-01T00:0{k}')
            for k in range(n)]


@pytest.fixture
def timeline_log(tmp_path):
    ("Run 'train': epoch 1 ran 4 steps (rollouts e1s1-e1s4; gates at steps 1 and 3), epoch 2 ran 2 steps (a gate at "
     "step 2).")
    with HarnessLog(tmp_path/'harness.db') as log:
        for g, tt, d in (('e1s1', 'Counting Problem', 'accept_confirmed'), ('e1s3', 'OCR Problems', 'reject_inertia'),
                         ('e2s2', 'Counting Problem', 'reject_futility')):
            log.insert('gate_evidence', gate_rows(g, tt, d))
        for g in ('e1s1', 'e1s2', 'e1s3', 'e1s4', 'e2s1', 'e2s2'):
            log.start_run(TrainRunId('train').rollout(g), 'infer')
        yield log


def test_the_timeline_counts_every_training_step_and_marks_the_epochs(timeline_log):
    tl = report.decision_timeline(timeline_log, 'train')
    # the 4 steps of epoch 1 come first, so epoch 2's step 2 is the run's 6th step (it was gate number 3)
    assert tl.select('gate_id', 'training_step').rows() == [('e1s1', 1), ('e1s3', 3), ('e2s2', 6)]
    ax = report.plot_decision_timeline(tl, steps=report.training_steps(timeline_log, 'train')).axes[0]
    assert ax.collections[0].get_offsets()[:, 0].tolist() == [1, 3, 6]
    assert 'training step' in ax.get_xlabel() and 'gate (' not in ax.get_xlabel()
    assert [l.get_xdata()[0] for l in ax.get_lines()] == [4.5]  # one boundary, between steps 4 and 5
    assert [t.get_text() for t in ax.child_axes[0].get_xticklabels()] == ['epoch 1', 'epoch 2']
    assert ax.get_xlim() == (0.5, 6.5)  # the ungated steps (2, 4, 5) are on the axis too


# item 9: the split's share axis had no label, difficulty read easy/hard/medium, and T0/T1/T2/degraded went unexplained
@pytest.fixture(scope='module')
def toy_split():
    "A split of 12 videos x 3 questions, difficulties easy, medium and hard in turn."
    from treetrm.data import Question
    from treetrm.split.by_video import build_split
    qs = [Question(f'v{v:02d}q{j}', f'v{v:02d}', ('Counting Problem', 'OCR Problems')[(v + j) % 2], 'How many?',
                   ('A. 1', 'B. 2'), 'A', difficulty=('hard', 'easy', 'medium')[j])
          for v in range(12) for j in range(3)]
    sigs = [dict(run_id='base', question_id=q.question_id, diag_fingerprint='fp', tier=('T2', 'T1')[i % 2],
                 degraded=False) for i, q in enumerate(qs[::3])]
    config = dict(seed=0, test_ratio=0.3, epsilon=0.3, report_floor=4, floor_k={}, val_ratio=0.4, val_wrong_min=0)
    return build_split(qs, sigs, config=config)


def test_difficulty_reads_from_easy_to_hard(toy_split):
    from treetrm.split.stage import plot_pools, pool_distribution
    assert pool_distribution(toy_split, 'difficulty')['difficulty'].to_list() == ['easy', 'medium', 'hard']
    ax = plot_pools(toy_split).axes[1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ['easy', 'medium', 'hard']


def test_the_split_figure_labels_its_share_axis_in_percent_with_the_legend_outside(toy_split):
    from matplotlib.ticker import PercentFormatter
    from treetrm.split.stage import plot_pools
    fig = freeze_layout(plot_pools(toy_split))
    assert 'share' in fig.axes[0].get_ylabel()
    assert all(isinstance(ax.yaxis.get_major_formatter(), PercentFormatter) for ax in fig.axes)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert len(legends) == 1 and outside(legends[0].get_window_extent(), [ax.get_window_extent() for ax in fig.axes])


def test_the_split_tables_say_what_each_signal_label_means(toy_split, capsys):
    from treetrm.split.stage import show_split
    show_split(toy_split)  # outside IPython: the tables and the note, printed
    said = capsys.readouterr().out
    # the judge's own definitions (prompts/diagnose/defect_vs_lapse.md) and the split's (Phase 0: INFRA/empty = T0)
    for label, meaning in (('T0', 'an INFRA failure or an empty answer'), ('T1', 'a lapse'), ('T2', 'a skill defect'),
                           ('degraded', 'the judge could not diagnose')):
        assert f'{label} = {meaning}' in said, said


# item 10: no start point, "R" undefined, the best line past the last epoch, final_accuracy_curves a copy of the last
EPOCHS = pl.DataFrame(dict(epoch=[0, 1, 2], rollout_accuracy=[None, 0.4, 0.5], validation_accuracy=[0.5, 0.55, 0.6]))


def test_the_accuracy_curves_start_at_the_start_skills_and_name_their_lines_in_words():
    fig = freeze_layout(report.plot_accuracy_curves(EPOCHS))
    ax = fig.axes[0]
    lines = {l.get_label(): l for l in ax.get_lines() if not l.get_label().startswith('_')}
    assert [t.get_text() for t in ax.get_xticklabels()] == ['start', '1', '2']
    assert lines['validation pool'].get_xdata().tolist() == [0, 1, 2]  # the start skills at epoch 0
    assert lines['training mini-batches'].get_xdata().tolist() == [1, 2]  # no rollout before training
    assert not any(label == 'R' or ' R' in label or 'R ' in label for label in lines), list(lines)
    assert max(lines['best validation so far'].get_xdata()) == 2  # the best line ends at the last epoch
    assert outside(ax.get_legend().get_window_extent(), [ax.get_window_extent()])


def test_the_runner_puts_the_start_skills_at_epoch_0():
    from treetrm.train.runner import accuracy_curves
    rows = accuracy_curves([dict(epoch=1, rollout_accuracy=None, validation_accuracy=0.6)], start=0.5)
    assert rows == [dict(epoch=0, rollout_accuracy=None, validation_accuracy=0.5),
                    dict(epoch=1, rollout_accuracy=None, validation_accuracy=0.6)]  # no rollout is no rollout, not 0


def test_the_final_curves_add_the_final_test():
    test = dict(accuracy_before=0.5, ci_low_before=0.4, ci_high_before=0.6, accuracy_after=0.62, ci_low_after=0.5,
                ci_high_after=0.7)
    ax = report.plot_accuracy_curves(EPOCHS, test=test, labels=('seed skills', 'delivered skills (v3)')).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ['start', '1', '2', 'final\ntest']
    bars = [c for c in ax.containers if 'test pool' in c.get_label()]
    assert [c.get_label() for c in bars] == ['test pool: seed skills, 95% interval',
                                             'test pool: delivered skills (v3), 95% interval']
    assert [b.lines[0].get_ydata()[0] for b in bars] == [0.5, 0.62]


# item 11: the loop benchmark's figures were ~3 inches wide with 5-point legends inside the axes, rules at equal risk
# drawn on top of each other, no intervals on the budget curves; the verdict table held strings
RULES = ('fixed_n', 'gate', 'gepa', 'greedy', 'oracle')


@pytest.fixture(scope='module')
def one_cell():
    "A grid summary of one cell, 3 world seeds, where every rule's risk is 0 (none delivered worse than the seed)."
    from treetrm.bench.grid import BenchSettings, CellSpec
    from treetrm.bench.loop_report import grid_summary
    gains = {r: (1.0 + k, 2.0 + k, 3.0 + k) for k, r in enumerate(RULES)}
    row = lambda rule, s, g: dict(seed=s, rule=rule, gain=g, worse_than_seed=False, harmful_points=0.0,
                                  gain_by_budget={'0.5': g / 2, '1': g}, calls=dict(agent=80, judge=10, evolver=10),
                                  bins=None, wall_s=0.0, worse_by_half=False, population_gain=g)
    rows = {(0, s): [row(rule, s, g[s]) for rule, g in gains.items()] for s in range(3)}
    cell = CellSpec(dict(n_videos=50, realism=dict(effects='rich', flip_rate=0.15)), 100)
    return grid_summary([cell], range(3), list(gains), rows, BenchSettings(), time.perf_counter())


@pytest.mark.parametrize('plot', ['plot_frontier', 'plot_budget', 'plot_pooled'])
def test_loop_figures_read_at_paper_size_with_one_legend_clear_of_the_data(one_cell, plot):
    from treetrm.bench import loop_report
    fig = freeze_layout(getattr(loop_report, plot)(one_cell))
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert fig.get_figwidth() >= 3.3  # a column of a paper, printed at its size
    assert not any(ax.get_legend() for ax in axes) and len(fig.legends) == 1
    legend = fig.legends[0]
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 7  # 5-point text was unreadable
    assert outside(legend.get_window_extent(), [ax.get_window_extent() for ax in axes])  # the oracle ran through it
    assert [t.get_text() for t in legend.get_texts()] == ['fixed-n McNemar', 'treetrm gate', 'GEPA rule', 'greedy val.',
                                                          'oracle']


def drawn_x(container) -> float:
    "Where the container's point is drawn, in display units."
    line = container.lines[0]
    return float(line.get_transform().transform(line.get_xydata())[0, 0])


@pytest.mark.parametrize('plot', ['plot_frontier', 'plot_pooled'])
def test_rules_at_equal_risk_are_drawn_side_by_side(one_cell, plot):
    from treetrm.bench import loop_report
    ax = freeze_layout(getattr(loop_report, plot)(one_cell)).axes[0]
    assert all(c.lines[0].get_xdata()[0] == 0 for c in ax.containers)  # every rule's risk is 0 ...
    xs = sorted(drawn_x(c) for c in ax.containers)
    assert len(xs) == len(RULES) and min(np.diff(xs)) >= 3  # ... and each point shows, 3 or more pixels apart


def test_the_budget_curves_carry_intervals_over_world_seeds(one_cell):
    from scipy.stats import t as t_dist
    from treetrm.bench.loop_report import plot_budget
    ax = plot_budget(one_cell).axes[0]
    gate = next(c for c in ax.containers if c.get_label() == 'treetrm gate')
    segments = gate.lines[2][0].get_segments()
    # gate's gains at 1x over the 3 seeds: 2, 3, 4 -> mean 3, sd 1, half-width t(0.975, 2) / sqrt(3)
    half = t_dist.ppf(0.975, 2) / np.sqrt(3)
    assert np.allclose([s[:, 1] for s in segments][1], [3 - half, 3 + half])


def test_the_verdict_table_is_typed_and_shares_show_as_percentages(one_cell, capsys):
    from treetrm.bench.loop_report import show_loop_bench, verdict_table
    v = verdict_table(one_cell)
    assert v.schema['gain_at_least_best_other'] == pl.Boolean and v.schema['share_of_oracle'] == pl.Float64
    row = v.row(0, named=True)
    # the gate (mean gain 3) against the best other practical rule, greedy (5); the oracle's mean gain is 6
    assert (row['best_other'], row['gain_at_least_best_other'], row['risk_at_most_every_other']) == ('greedy', False,
                                                                                                       True)
    assert row['share_of_oracle'] == pytest.approx(0.5)
    show_loop_bench(one_cell)
    said = capsys.readouterr().out
    assert '50.0%' in said  # the share as a percentage where it is shown


# item 15: the script form's artifact held 10 figure files, the Jupyter form's (show=True) 32
@pytest.mark.slow  # a split, two two-epoch trainings and two exports on a 12-video sim world: 30-60 s
def test_the_artifact_holds_the_same_files_shown_or_not(tmp_path):
    from treetrm.sim.world import make_world
    from treetrm.train.runner import Runner
    world = make_world(tmp_path/'world', seed=1, n_videos=12)
    split = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
    config = dict(epochs=2, min_ladder_units=8, validation_pass='fresh',
                  batch=dict(batch_size=8, min_class=2, correct_ratio=0.2))
    runner = lambda ws: Runner(ws, data_dir=world, split_config=split, config=config, concurrency=4, progress=False)
    asyncio.run(runner(tmp_path/'script').split())
    shutil.copytree(tmp_path/'script', tmp_path/'jupyter')  # the same pools: the same training
    files = {}
    for form, show in (('script', False), ('jupyter', True)):
        r = runner(tmp_path/form)
        with contextlib.redirect_stdout(io.StringIO()): res = asyncio.run(r.train('v1', show=show))
        art = r.export('v1', tmp_path/f'{form}_artifact')
        files[form] = sorted(str(p.relative_to(art)) for p in art.rglob('*') if p.is_file())
    assert files['script'] == files['jupyter']
    figures = [f for f in files['script'] if f.startswith('figures/') and f.endswith('.png')]
    # every gated step's e-values and every epoch's figures, not only the final report's
    assert {f.split('_')[0] for f in figures} == {'figures/step', 'figures/epoch1', 'figures/epoch2', 'figures/final'}
    last = len(res.metrics['epochs'])
    art = tmp_path/'script_artifact'/'figures'
    assert (art/'final_accuracy_curves.png').read_bytes() != (art/f'epoch{last}_accuracy_curves.png').read_bytes()
