"""The `treetrm` command (issue 32, item 8): `treetrm <stage>` and `python -m treetrm <stage>` run the stage notebooks
through papermill, the report lands in the run's own folder, `--help` lists each stage's parameters as the notebooks
define them, a bad stage or parameter name exits with code 2, and `python -m treetrm.train.runner` no longer exits 0
silently."""
import json, shutil, subprocess, sys
from pathlib import Path

import papermill
import papermill.cli
import pytest

from treetrm.core import project_root, read_json
from treetrm.sim.world import make_world

pytestmark = [pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = project_root()
STAGES = ('build', 'split', 'train', 'eval')
TREETRM = shutil.which('treetrm', path=str(Path(sys.executable).parent))  # the console script of this environment


def command(*words, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    "Run `python -m treetrm <words>`."
    return subprocess.run([sys.executable, '-m', 'treetrm', *words], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_console_script_is_installed():
    assert TREETRM, 'no treetrm script beside this python: reinstall with pip install -e .[dev]'
    done = subprocess.run([TREETRM, '--help'], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and 'usage: treetrm' in done.stdout, done.stderr[-2000:]


def test_help_lists_every_stage_and_its_notebook_parameters():
    done = command('--help')
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in STAGES:
        assert f'{stage} (nbs/{stage}.ipynb):' in done.stdout
        for name in papermill.inspect_notebook(str(ROOT/'nbs'/f'{stage}.ipynb')):
            assert f'  {name} = ' in done.stdout, (stage, name)
    assert '  alpha_prov = None' in done.stdout  # every assignment of the parameters cell is readable by papermill
    stage_help = command('train', '--help')
    assert stage_help.returncode == 0 and '--run-id' in stage_help.stdout and 'max_calls = None' in stage_help.stdout


@pytest.mark.parametrize('words, said', [(['trian'], "invalid choice: 'trian'"),
                                         (['train', '-p', 'epoch', '3'], "no parameter 'epoch' (did you mean epochs?)"),
                                         (['eval', '-p', 'bounds', '{}'], "stage eval has no parameter 'bounds'"),
                                         (['build', '--config', 'my.yaml'], 'unrecognized arguments: --config')])
def test_a_bad_stage_or_parameter_name_exits_2(words, said):
    done = command(*words)
    assert done.returncode == 2 and said in done.stderr, (done.returncode, done.stderr[-2000:])


def test_values_are_converted_as_papermill_converts_them():
    from treetrm.cli import text_value
    for text in ('3', '-2', '0.1', '1e-3', 'True', 'False', 'None', 'v2', "{'train.gate.tau': 0.1}", '[1, 2]', 'nan'):
        got, want = text_value(text), papermill.cli._resolve_type(text)
        assert type(got) is type(want) and (got == want or got != got), (text, got, want)


def test_runner_module_points_at_the_command():
    done = subprocess.run([sys.executable, '-m', 'treetrm.train.runner', '--help'], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and 'treetrm --help' in done.stderr, (done.returncode, done.stderr[-2000:])


@pytest.mark.slow
def test_train_writes_its_report_in_the_run_folder(tmp_path):
    "`treetrm train --run-id v2 -p epochs 1 --config small.yaml` on a small world, run from another folder."
    world, ws = make_world(tmp_path/'world', seed=0, n_videos=8), tmp_path/'ws'
    (tmp_path/'small.yaml').write_text('train:\n  epochs: 3\n  batch: {batch_size: 8}\n')
    small = ['-p', 'workspace', str(ws), '-p', 'data_dir', str(world), '-p', 'min_ladder_units', '4',
             '-p', 'concurrency', '4', '-p', 'patience', '1', '-p', 'show_steps', 'False']
    done = command('train', '--run-id', 'v2', '-p', 'epochs', '1', '--config', 'small.yaml', *small, cwd=tmp_path,
                   timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = ws/'runs'/'v2'/'train.ipynb'
    assert str(report) in done.stdout and not (tmp_path/'out.ipynb').exists()
    frozen = read_json(ws/'runs'/'v2'/'checkpoint.json')['state']['structural']['config']
    assert frozen['epochs'] == 1 and frozen['batch']['batch_size'] == 8  # -p wins over the file, the file is read
    cells = json.loads(report.read_text())['cells']
    injected = next(c for c in cells if 'injected-parameters' in c['metadata'].get('tags', []))
    assert 'run_id = "v2"' in ''.join(injected['source']) and 'epochs = 1' in ''.join(injected['source'])
    assert any(o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', []))  # executed, with outputs
    assert read_json(ws/'runs'/'v2'/'metrics.json')['run_id'] == 'v2'


@pytest.mark.slow
def test_a_failing_stage_exits_1_and_keeps_its_report(tmp_path):
    done = command('eval', '-p', 'workspace', str(tmp_path/'empty'), '-p', 'pool', 'nowhere', cwd=tmp_path)
    assert done.returncode == 1 and 'stage eval stopped' in done.stderr, (done.returncode, done.stderr[-2000:])
    assert (tmp_path/'empty'/'reports'/'eval_nowhere_best.ipynb').exists()
