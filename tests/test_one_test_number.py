"""One test number (issue 32, item 2): the train stage's final test is a record the eval stage reads. The README's
eval command shows it by default (no model call, no new look at the test pool); `-p again True` evaluates again, a new
draw of the same pool that is labelled so, counted as a look and warned about; `test_looks` lists every look with its
skills and time. The README's train and eval commands run as written, through papermill, on a small world."""
import json, re, shlex, subprocess

import pytest

from treetrm.core import project_root, read_json
from treetrm.log import HarnessLog
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world
from treetrm.gate.validate import base_skills_sha

pytestmark = [pytest.mark.slow, pytest.mark.notebooks]  # the tiers: conftest.py

ROOT = project_root()
README = (ROOT/'README.md').read_text(encoding='utf-8')
TRAIN = re.search(r'(\.venv/bin/papermill nbs/train\.ipynb out\.ipynb -k python3 -p run_id v1)\n', README)[1]
EVAL = re.search(r'`(\.venv/bin/papermill nbs/eval\.ipynb eval\.ipynb -k python3)`', README)[1]
SMALL = ['-p', 'epochs', '1', '-p', 'min_ladder_units', '4', '-p', 'batch_size', '8', '-p', 'patience', '1',
         '-p', 'concurrency', '4', '-p', 'show_steps', 'False']  # a short training run
LOOK_KINDS = ('final_test', 'eval')  # the run kinds that answer test-pool questions with chosen skills


def readme_command(command: str, out, *params) -> str:
    "Run a README command word for word (its output notebook moved to `out`), with more parameters; its outputs' text."
    words = [str(out) if w.endswith('.ipynb') and not w.startswith('nbs/') else w for w in shlex.split(command)]
    done = subprocess.run(words + [str(p) for p in params], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads(out.read_text())['cells']
    outputs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    return ''.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for o in outputs)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "The README's training command on an 8-video sim world: (workspace, world, metrics.json, the train report's text)."
    root = tmp_path_factory.mktemp('one_number')
    world, ws = make_world(root/'world', seed=0, n_videos=8), root/'ws'
    shown = readme_command(TRAIN, root/'out.ipynb', '-p', 'workspace', ws, '-p', 'data_dir', world, *SMALL)
    return ws, world, read_json(ws/'runs'/'v1'/'metrics.json'), shown


def looks_and_calls(ws) -> tuple[list, int]:
    "The runs of the kinds that look at the test pool, and the number of model calls, in the workspace's harness.db."
    log = HarnessLog(ws/'harness.db')
    try:
        runs = log.runs().filter(log.runs()['kind'].is_in(LOOK_KINDS))
        return sorted(runs['run_id'].to_list()), log.frame('llm_calls').height
    finally: log.close()


def eval_params(ws, world) -> list:
    return ['-p', 'workspace', ws, '-p', 'data_dir', world]


def test_eval_shows_the_train_stages_final_test(trained, tmp_path):
    ws, world, m, train_shown = trained
    before = looks_and_calls(ws)
    shown = readme_command(EVAL, tmp_path/'eval.ipynb', *eval_params(ws, world))
    assert looks_and_calls(ws) == before  # no new look at the test pool, no model call
    assert (f"the train stage's final test (run {m['test']['delivered_run']}" in shown
            and 'the number to report' in shown)
    accuracy = re.search(r'test pool, skills (v\d+): accuracy ([\d.]+)', shown)
    assert accuracy[1] == m['delivered_version'] and float(accuracy[2]) == round(m['test']['delivered_accuracy'], 3)
    printed = re.search(r'test accuracy: seed [\d.]+ -> delivered v\d+ ([\d.]+)', train_shown)[1]  # the train report
    assert accuracy[2] == printed
    assert 'RepeatedTestLook' not in shown


def test_eval_again_is_a_new_look_with_a_warning(trained, tmp_path):
    ws, world, m, _ = trained
    v, final = m['delivered_version'], m['test']['delivered_run']
    (runs, calls) = looks_and_calls(ws)
    shown = readme_command(EVAL, tmp_path/'eval.ipynb', *eval_params(ws, world), '-p', 'again', 'True')
    assert looks_and_calls(ws)[0] == sorted(runs + [f'eval_test_{v}'])  # one new look ...
    assert looks_and_calls(ws)[1] > calls  # ... answered by the model
    assert f'a new draw of the same pool (run eval_test_{v}, look 2' in shown
    assert 'RepeatedTestLook' in shown and 'biases the reported gain upward' in shown
    assert f"Report the train stage's final test of skills {v} (run {final})" in shown
    looks = Runner(ws, data_dir=world, progress=False).test_looks()
    assert looks['run_id'].to_list() == [final, f'eval_test_{v}'] and looks['look'].to_list() == [1, 2]
    assert looks['skills_version'].to_list() == [v, v]
    assert looks['skills_sha256'].to_list() == [base_skills_sha(ws/'skills'/v)] * 2
    assert looks['started_at'].is_sorted() and looks['started_at'].null_count() == 0
    assert (ws/'figures'/f'accuracy_test_{v}_eval_test_{v}.png').exists()  # beside, not over, the final test's figure
