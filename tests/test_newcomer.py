"""What a newcomer tripped on (issue 51): files readable by others, `--help` without a checkout, a process pool in a
script without a `__main__` guard, README examples that do not clash, and messages that name what to write."""
import os, stat, subprocess, sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from treetrm.core import atomic_write_bytes, atomic_write_json, atomic_write_text


@contextmanager
def umask(mask: int):
    "Run the block under the process umask `mask`."
    old = os.umask(mask)
    try: yield
    finally: os.umask(old)


def mode(path: Path) -> int: return stat.S_IMODE(path.stat().st_mode)


# item 4: every file treetrm writes was 0600 (mkstemp), whatever the umask
@pytest.mark.parametrize('mask, file_mode, folder_mode', [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_written_files_get_the_mode_open_gives_under_the_umask(tmp_path, mask, file_mode, folder_mode):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from treetrm.figures import save_figure
    from treetrm.agent.versions import VersionStore
    with umask(mask):
        written = [atomic_write_bytes(tmp_path/'a.bin', b'x'), atomic_write_text(tmp_path/'b.txt', 'x'),
                   atomic_write_json(tmp_path/'c.json', {'a': 1})]
        fig, _ = plt.subplots()
        written += list(save_figure(fig, 'f', tmp_path/'figures', formats=('png', 'svg')).values())
        plt.close(fig)
        store = VersionStore(tmp_path/'ws', 'prompts')
        version = store.base/store.create({'system.md': 'x'}, parent=None, source='seed')
        plain = tmp_path/'plain.txt'
        plain.write_text('x')  # what a plain open(..., 'w') gives
    assert mode(plain) == file_mode
    written += [version/'system.md', version/'meta.json']
    assert {p.name: mode(p) for p in written} == {p.name: file_mode for p in written}
    assert mode(version) == folder_mode  # a skill version's folder: what a plain mkdir gives


# item 7: `treetrm --help` after a non-editable `pip install .` exited 1 (no settings.ini), and asked for papermill
ROOT = Path(__file__).resolve().parents[1]
STAGES = ('build', 'split', 'train', 'eval')


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    ("A copy of the package outside any checkout, as `pip install .` leaves it, and a folder whose `papermill` cannot "
     "be imported (as without the dev extra): (site folder, blocker folder, an empty working folder).")
    import shutil
    base = tmp_path_factory.mktemp('installed')
    shutil.copytree(ROOT/'treetrm', base/'site'/'treetrm', ignore=shutil.ignore_patterns('__pycache__'))
    (base/'block').mkdir()
    (base/'block'/'papermill.py').write_text("raise ImportError('papermill is blocked by the test')\n")
    (base/'work').mkdir()
    return base/'site', base/'block', base/'work'


def treetrm(*words, path, cwd, root=None) -> subprocess.CompletedProcess:
    "`python -m treetrm <words>` with only `path` (and the environment's site-packages) to import from."
    env = {k: v for k, v in os.environ.items() if k not in ('TREETRM_ROOT', 'PYTHONPATH')}
    env['PYTHONPATH'] = os.pathsep.join(str(p) for p in path)
    if root: env['TREETRM_ROOT'] = str(root)
    return subprocess.run([sys.executable, '-m', 'treetrm', *words], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_help_works_outside_a_checkout_and_a_stage_says_what_is_missing(installed):
    site, _, work = installed
    done = treetrm('--help', path=[site], cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'usage: treetrm' in done.stdout and all(stage in done.stdout for stage in STAGES), done.stdout
    assert 'checkout' in done.stdout and 'TREETRM_ROOT' in done.stdout, done.stdout
    stage_help = treetrm('train', '--help', path=[site], cwd=work)
    assert stage_help.returncode == 0 and 'usage: treetrm train' in stage_help.stdout, stage_help.stderr[-2000:]
    run = treetrm('train', '--run-id', 'v2', '-p', 'epochs', '3', path=[site], cwd=work)
    assert run.returncode == 1 and 'Traceback' not in run.stderr, run.stderr[-2000:]
    assert 'stage notebooks' in run.stderr and 'checkout' in run.stderr and 'TREETRM_ROOT' in run.stderr, run.stderr


def test_help_works_without_papermill_and_a_stage_says_how_to_install_it(installed):
    site, block, work = installed
    done = treetrm('--help', path=[block, site], cwd=work, root=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(stage in done.stdout for stage in STAGES) and 'papermill' in done.stdout, done.stdout
    assert treetrm('eval', '--help', path=[block, site], cwd=work, root=ROOT).returncode == 0
    run = treetrm('train', '--run-id', 'v2', path=[block, site], cwd=work, root=ROOT)
    assert run.returncode == 1 and 'Traceback' not in run.stderr, run.stderr[-2000:]
    assert 'papermill, which is not installed' in run.stderr and 'pip install papermill' in run.stderr, run.stderr


# item 17: a script with executor='processes' and no `__main__` guard ended in BrokenProcessPool and "run again to
# resume it", which failed the same way
SCRIPT = '''import asyncio
from treetrm.executors import run_jobs

async def main():
    jobs = {0: (0.01, ), 1: (0.01, )}
    async for k, _ in run_jobs(asyncio.sleep, jobs, processes=2, describe=lambda k: 'run again to resume it'):
        print('finished', k)
'''


@pytest.mark.parametrize('guarded', [False, True])
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path, guarded):
    script = tmp_path/'jobs.py'
    last = "if __name__ == '__main__':\n    asyncio.run(main())\n" if guarded else 'asyncio.run(main())\n'
    script.write_text(SCRIPT + '\n' + last)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'} | {'PYTHONPATH': str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    if guarded:
        assert done.returncode == 0 and 'finished 1' in done.stdout, done.stderr[-3000:]
        return
    last_error = done.stderr.strip().rsplit('\nTraceback', 1)[-1]  # this process's error, not a worker's
    assert done.returncode == 1 and 'treetrm.core.ConfigError: ' in last_error, done.stderr[-3000:]
    said = last_error.split('treetrm.core.ConfigError: ', 1)[1]  # the message and its notes
    assert "no `if __name__ == '__main__':` guard" in said and str(script) in said, said
    assert 'run again to resume it' not in said, said


# item 20 (part): a misspelt skills version was refused as "not a version name ... Use v1, v2, ..." without naming
# the words the stages take
def test_a_misspelt_skills_version_names_the_words_it_may_be(tmp_path):
    from treetrm.core import ConfigError
    from treetrm.train.workspace import Workspace
    ws = Workspace(tmp_path/'ws', backend='sim')
    assert ws.resolve_version('seed') == 'v1' and ws.resolve_version('v1') == 'v1'
    with pytest.raises(ConfigError) as e:
        ws.resolve_version('bset')
    said = str(e.value)
    assert "did you mean 'best'" in said and all(f"'{w}'" in said for w in ('best', 'current', 'seed')), said


# carried over: check_run_id accepted '../x', a run folder outside the workspace's runs/
@pytest.mark.parametrize('run_id', ['../x', '..', '.', 'a/b', 'a\\b', '/tmp/x'])
def test_a_run_id_cannot_leave_the_workspace(run_id):
    from treetrm.core import ConfigError
    from treetrm.log import check_run_id
    with pytest.raises(ConfigError, match='run_id .* path'):
        check_run_id(run_id)
    assert check_run_id('v2.1_a-b') == 'v2.1_a-b'


# item 1: own data with a 2-video test pool read `delta 0.0769 [0.0769, 0.0769]`: both videos had the same W - L, so
# the clustered variance was 0 and the 95% interval a point
def _paired_pool(tmp_path, n_videos, wins_per_video):
    "A log with runs A and B on `n_videos` videos of 4 questions; on each video B wins `wins_per_video` questions."
    from treetrm.data import Question
    from treetrm.log import HarnessLog
    qs = [Question(f'v{v}-{k}', f'v{v}', 'Counting Problem', 'q?', ('A. x', 'B. y'), 'A') for v in range(n_videos)
          for k in range(4)]
    log = HarnessLog(tmp_path/'harness.db')
    for run, right in (('A', lambda k: k == 3), ('B', lambda k: k == 3 or k < wins_per_video)):
        log.insert('predictions', [dict(run_id=run, question_id=q.question_id, video_id=q.video_id,
                                        task_type=q.task_type, correct=right(int(q.question_id[-1]))) for q in qs])
    return log, qs


def test_an_interval_from_two_videos_with_equal_change_is_not_a_point(tmp_path):
    from treetrm.report import paired_comparison
    log, qs = _paired_pool(tmp_path, 2, 1)  # each video: W 1, L 0, so the per-video changes agree exactly
    row = paired_comparison(log, 'A', 'B', qs).filter(task_type='ALL').row(0, named=True)
    log.close()
    assert (row['n_videos'], row['w'], row['l'], row['delta']) == (2, 2, 0, 0.25)
    # two videos cannot bound the change: the interval must hold both signs (0.25 ± 12.7 · anything ≥ 0.25/12.7)
    assert row['delta_low'] < 0 < row['delta_high'], row
    assert 'too few videos' in row['interval'], row


def test_an_interval_from_enough_videos_stays_the_clustered_one(tmp_path):
    from treetrm.intervals import MIN_CLUSTERS, clustered_mean
    from treetrm.report import paired_comparison
    n = MIN_CLUSTERS + 3
    log, qs = _paired_pool(tmp_path, n, 1)
    pc = paired_comparison(log, 'A', 'B', qs)
    log.close()
    row = pc.filter(task_type='ALL').row(0, named=True)
    assert row['interval'] == 'clustered by video', row
    # videos with different changes: the plain CR1 interval, as the formula in 03b_intervals gives it
    y, vids = [1, 0, 0, 0, 1, 1, 0, 0] * 3, [v for v in range(6) for _ in range(4)]
    c = clustered_mean(y, vids, bounds=(-1.0, 1.0))
    assert not c.conservative and c.low > 0 and c.high - c.low < 1


@pytest.mark.parametrize('n_videos', [2, 3, 4])
def test_a_proportion_from_few_videos_counts_each_video_once(n_videos):
    from scipy import stats
    from treetrm.intervals import clustered_proportion, wilson_interval
    y, vids = [1, 0] * (2*n_videos), [v for v in range(n_videos) for _ in range(4)]  # every video exactly half right
    c = clustered_proportion(y, vids)
    z = stats.t.ppf(0.975, n_videos - 1)
    # the worst case, all questions of a video alike: Wilson on the number of videos, not on n = 4 · videos
    assert c.conservative and (c.low, c.high) == pytest.approx(wilson_interval(0.5, n_videos, z), abs=1e-12)


# item 2: accepts made by the gate's final look (exact McNemar at the ladder end) read `accept_confirmed` with no
# reason, and their markers sat under the "confirm at 54" line
def _final_look_trajectory():
    "Two types: one confirmed by E+ over its level (54), one confirmed at the ladder end with E+ 15 under it."
    import polars as pl
    rows = [dict(task_type='Counting Problem', n_used=k, w=k, l=0, e_value=2.0**k,
                 decision='accept_confirmed' if k == 6 else 'continue') for k in range(1, 7)]
    rows += [dict(task_type='OCR Problems', n_used=k, w=min(k, 6), l=0, e_value=15.0 * k/8,
                  decision='accept_confirmed' if k == 8 else 'continue') for k in range(1, 9)]
    return pl.DataFrame(rows)


def test_an_accept_by_the_final_look_says_so_in_the_figure():
    from treetrm.report import plot_e_values
    levels = {'Counting Problem': 54.0, 'OCR Problems': 54.0}
    ax = plot_e_values(_final_look_trajectory(), thresholds=levels, alpha_final=0.09).axes[0]
    texts = [t.get_text() for lg in ax.figure.legends + [c for c in ax.get_children()
                                                           if type(c).__name__ == 'Legend'] for t in lg.get_texts()]
    final = [t for t in texts if 'final look' in t]
    assert len(final) == 1 and 'p ≤ 0.09' in final[0], texts  # one legend entry, with alpha_final
    assert 'accept_confirmed' in texts, texts  # the E+ confirm keeps its own entry
    notes = [t.get_text() for t in ax.texts]
    # W 6, L 0: exact one-sided McNemar p = P(Bin(6, 1/2) >= 6) = 1/64 = 0.0156; the note prints it by the marker
    assert any('p = 0.0156' in t for t in notes), notes


def test_an_accept_by_the_final_look_gets_its_reason_in_the_step_table():
    import polars as pl
    from treetrm.report import with_gate_reasons
    steps = pl.DataFrame(dict(task_type=['Counting Problem', 'OCR Problems', 'Temporal Reasoning'],
                              decision=['accept_confirmed'] * 2 + ['reject_inertia'], reason=[None, None, None],
                              w=[6, 6, 0], l=[0, 0, 0], n_used=[6, 8, 8], e_value=[64.0, 15.0, 1.0]))
    out = with_gate_reasons(steps, {'Counting Problem': 54.0, 'OCR Problems': 54.0, 'Temporal Reasoning': 54.0},
                            alpha_final=0.09)
    reasons = dict(zip(out['task_type'], out['reason']))
    # W 6, L 0: p = 1/64 = 0.0156 (as above), under alpha_final, while E+ 15 stayed under its level 54
    assert reasons['OCR Problems'] == ('ladder end: the final look confirmed it, exact McNemar p = 0.0156 <= '
                                       'alpha_final = 0.09 (E+ = 15 < 54)'), reasons
    assert reasons['Counting Problem'] == 'E+ = 64 >= 54', reasons
    assert reasons['Temporal Reasoning'] is None, reasons  # only accepts are explained here


# item 3: a task type's colour changed between e-value figures (Counting Problem green, then blue, then pink), and
# its green was the accept marker's
def test_a_task_type_keeps_one_colour_across_figures_and_never_a_decision_colour():
    from treetrm.figures import DECISION_COLORS, VIDEO_MME_TYPES, type_colors
    from treetrm.sim.world import VIDEO_MME_TYPE_COUNTS
    assert set(VIDEO_MME_TYPES) == set(VIDEO_MME_TYPE_COUNTS) and len(VIDEO_MME_TYPES) == 12
    alone = type_colors(['Counting Problem'])['Counting Problem']
    for others in (['OCR Problems'], ['Action Reasoning', 'Temporal Reasoning'], list(VIDEO_MME_TYPES), ['zzz']):
        assert type_colors(others + ['Counting Problem'])['Counting Problem'] == alone, others
    everyone = type_colors(VIDEO_MME_TYPES)
    assert len(set(everyone.values())) == 12  # Video-MME's types never share a colour
    mine = type_colors(['my own type'])['my own type']
    assert type_colors(['a', 'my own type', 'b'])['my own type'] == mine  # a type of one's own data: stable too

    def rgb(c): return np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)], float)
    decisions = [rgb(c) for c in set(DECISION_COLORS.values())]
    for t, c in everyone.items():  # not the same colour, nor one a reader takes for it (RGB distance over 60)
        assert min(np.linalg.norm(rgb(c) - d) for d in decisions) > 60, (t, c)


# item 5: `EValueAcceptance()` with its defaults never accepted anything, silently (237 proposals, 0 accepts,
# `reject_inertia: W=0 L=0 after 0 units`): without adapter and pool only the minibatch is seen, and it is not counted
def test_an_acceptance_without_evidence_is_refused_at_construction():
    from treetrm.core import ConfigError
    from treetrm.integrations.gepa import EValueAcceptance
    with pytest.raises(ConfigError) as e:
        EValueAcceptance()
    said = str(e.value)
    assert 'never accept' in said and 'adapter=' in said and 'pool=' in said and 'use_minibatch=True' in said, said
    assert EValueAcceptance(use_minibatch=True).params.alpha == 0.05  # asked for explicitly: the minibatch decides
    assert EValueAcceptance(adapter=object(), pool=list(range(600))).cap == 50  # the working form is unchanged


# item 20: the README said the reduced grid "takes about 2 min" with no measurement behind it (a newcomer saw 299 s).
# Issue 52: no page types that time by hand any more; the loop benchmark page reads `wall_s` from the committed JSON.
REDUCED_TIME = r'reduced grid[^.]*?\b\d+(\.\d+)?\s*(s|min|minutes|seconds)\b'  # a time typed after "reduced grid"


def test_no_page_types_the_reduced_grid_time_by_hand():
    import json, re
    root = Path(__file__).resolve().parents[1]
    texts = {p: p.read_text(encoding='utf-8') for p in [root/'README.md', *sorted((root/'docs').rglob('*.md'))]}
    assert not [p for p, text in texts.items() if re.search(REDUCED_TIME, text)]
    assert re.search(REDUCED_TIME, 'the reduced grid (1 cell × 3 seeds) trained in 97 s')  # the old README's words
    run = json.loads((root/'nbs'/'bench'/'results'/'loop-reduced-2026-12-07.json').read_text())
    assert run['wall_s'] > 0  # the measurement the benchmark page reads
    assert len(run['cells']) == 1 and run['cells'][0]['seeds'] == [0, 1, 2]  # the reduced grid, as ray.md says
