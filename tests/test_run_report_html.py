"""A shareable run report (issue 52, item 6): `treetrm report WORKSPACE RUN_ID` turns a finished training run into one
self-contained HTML page — the final test, provenance, every step's decisions with their evidence, every epoch's and
the final report, figures inside the page — that opens with nothing fetched from elsewhere; bad input exits with 1
saying what to do, and writes nothing. The page is read back with `html.parser`; the expected values come from
the run's own records (its checkpoint's decision log, metrics.json, gate_evidence in harness.db, the checkout's git
HEAD)."""
import asyncio, base64, io, math, shutil, subprocess, sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest

from treetrm.cli import main
from treetrm.core import package_dir, read_json
from treetrm.log import GATE_ID, HarnessLog
from treetrm.train.checkpoint import load_checkpoint
from treetrm.train.provenance import git_state
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world

SMALL_SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
SMALL = dict(epochs=2, patience=2, min_ladder_units=8, batch=dict(batch_size=4, min_class=2, correct_ratio=0.2))
PNG = b'\x89PNG\r\n\x1a\n'

pytestmark = [pytest.mark.slow]  # the module trains a small run first (about 10 s on 2 cores)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "A finished two-epoch training run 't1' on a 12-video sim world, one of its steps ungated: (world, workspace)."
    root = tmp_path_factory.mktemp('run_report')
    world = make_world(root/'world', seed=1, n_videos=12)
    runner = Runner(root/'ws', data_dir=world, split_config=SMALL_SPLIT, config=SMALL, concurrency=4, progress=False)
    asyncio.run(runner.train('t1'))
    runner.log.close()
    return world, root/'ws'


@pytest.fixture
def workspace(trained, tmp_path):
    "A copy of the trained workspace, for a test that may write."
    shutil.copytree(trained[1], tmp_path/'ws')
    return tmp_path/'ws'


def report(*words, cwd) -> subprocess.CompletedProcess:
    "Run `python -m treetrm report <words>` in `cwd`."
    return subprocess.run([sys.executable, '-m', 'treetrm', 'report', *map(str, words)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


class Page(HTMLParser):
    "What a report page holds: section ids, every src/href, and per entry heading (h4 id) its table rows and images."
    def __init__(self, text:str):
        super().__init__()
        self.sections, self.links, self.rows, self.images, self.text = [], [], {}, {}, []
        self.entry, self.row, self.cell = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [a[k] for k in ('src', 'href') if k in a]
        if tag == 'section': self.sections.append(a['id'])
        elif tag == 'h4': self.entry = a['id']
        elif tag == 'img': self.images.setdefault(self.entry, []).append(a['src'])
        elif tag == 'tr': self.row = []
        elif tag in ('td', 'th'): self.cell = []

    def handle_endtag(self, tag):
        if tag in ('td', 'th') and self.row is not None: self.row.append(''.join(self.cell).strip().strip('"'))
        elif tag == 'tr':
            self.rows.setdefault(self.entry, []).append(self.row)
            self.row = None
        if tag in ('td', 'th'): self.cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self.cell is not None: self.cell.append(data)

    def table(self, entry:str) -> list[dict]:
        "The rows of the table under heading `entry`, by column name (polars' header row, then its dtype row)."
        header, _dtypes, *rows = self.rows[entry]
        return [dict(zip(header, r)) for r in rows]


def number(text:str) -> float:
    return math.nan if text == 'null' else float(text)


def files_of(folder:Path) -> dict:
    "Relative path -> bytes of every file under `folder`."
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob('*') if p.is_file()}


def test_the_report_command_writes_every_step_with_its_evidence_and_figures(trained, workspace, tmp_path):
    world, _ = trained
    done = report(workspace, 't1', '-o', tmp_path/'t1.html', '--data-dir', world, cwd=tmp_path)
    assert done.returncode == 0 and str(tmp_path/'t1.html') in done.stdout, done.stderr[-3000:]
    page = Page((tmp_path/'t1.html').read_text(encoding='utf-8'))
    state, m = load_checkpoint(workspace/'runs'/'t1'/'checkpoint.json'), read_json(workspace/'runs'/'t1'/'metrics.json')
    # every step of the decision log has its section, each epoch and the end theirs, in the order they ran
    steps = list(dict.fromkeys(d['gate_id'] for d in state.decisions if GATE_ID.fullmatch(d['gate_id'])[2]))
    epochs = [f'epoch-{e["epoch"]}' for e in m['epochs']]
    assert len(steps) >= 4 and len(epochs) == 2
    assert [s for s in page.sections if s.startswith(('step-', 'epoch-'))] == [
        s for e in m['epochs'] for s in [f'step-{g}' for g in steps if g.startswith(f'e{e["epoch"]}s')] +
        [f'epoch-{e["epoch"]}']]
    assert page.sections[:2] == ['summary', 'provenance'] and page.sections[-1] == 'final'
    # every decision under its step, with its reason; a gate's with the evidence it ended on
    for d in state.decisions:
        if not GATE_ID.fullmatch(d['gate_id'])[2]: continue  # an epoch end's (best, momentum): in the final log
        (row, ) = [r for r in page.table(f'{d["gate_id"]}-decisions') if r['task_type'] == d['task_type']]
        assert row['decision'] == d['decision'], (d, row)
        if d['kind'] == 'step' or d['decision'] == 'accept_confirmed':  # why none, or which look confirmed it
            assert row['reason'] not in ('', 'null') and row['reason'] == (d.get('reason') or row['reason']), (d, row)
        if d['kind'] == 'gate':
            assert (int(row['w']), int(row['l']), int(row['n_used'])) == (d['w'], d['l'], d['n_used'])
            assert math.isclose(number(row['e_value']), d['e_value'], rel_tol=1e-5)
    # each gated step's gate table is the log's last gate evidence, and its e-value figure is a PNG inside the page
    log = HarnessLog(workspace/'harness.db', readonly=True)
    evidence = log.frame('gate_evidence', m['internal_run_id']).sort('gate_id', 'task_type', 'rank')
    log.close()
    gated = evidence['gate_id'].unique().to_list()
    assert gated and set(steps) - set(gated)  # a step that gated nothing has its section too, with its telemetry
    assert all(f'{g}-agent_telemetry' in page.rows for g in steps)
    for g in gated:
        last = evidence.filter(evidence['gate_id'] == g).group_by('task_type', maintain_order=True).last()
        shown = {r['task_type']: r for r in page.table(f'{g}-gate_table')}
        for t, w, l, e in last.select('task_type', 'w', 'l', 'e_value').rows():
            assert (int(shown[t]['w']), int(shown[t]['l'])) == (w, l)
            assert math.isclose(number(shown[t]['e_value']), e, rel_tol=1e-5)
        (src, ) = page.images[f'{g}-e_values']
        assert src.startswith('data:image/png;base64,')
        png = base64.b64decode(src.split(',', 1)[1])
        assert png[:8] == PNG and matplotlib.image.imread(io.BytesIO(png), format='png').shape[1] > 300
    # the final test as metrics.json has it, and the final report's figures
    t = m['test']
    said = f"seed {t['seed_accuracy']:.3f} -> delivered {m['delivered_version']} {t['delivered_accuracy']:.3f}"
    assert said in ''.join(page.text)
    assert {'final-accuracy_curves', 'final-before_after_figure', 'final-timeline_figure'} <= page.images.keys()
    # provenance: the commit of the checkout that made it, the run's frozen configuration
    prov = {r['name']: r['value'] for r in page.table('provenance-code_and_world')}
    config = {r['name']: r['value'] for r in page.table('provenance-configuration')}
    if git := git_state(package_dir().parent):
        assert prov['git.commit'] == git['commit']
    assert config['questions_sha'] == state.structural['questions_sha'] and config['run_id'] == 't1'
    # nothing to fetch: every src and href is inside the page
    assert page.links and all(l.startswith(('data:', '#')) for l in page.links), [l[:40] for l in page.links]


def test_the_report_goes_beside_the_runs_metrics_by_default(trained, workspace, tmp_path):
    done = report('ws', 't1', '--data-dir', trained[0], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workspace/'runs'/'t1'/'report.html').is_file() and str(Path('ws')/'runs'/'t1'/'report.html') in done.stdout


def unfinished(ws:Path):
    "Make a run folder with no metrics.json."
    (ws/'runs'/'t2').mkdir()
    return 't2'


@pytest.mark.parametrize('case, said', [
    ('no workspace', ['no treetrm workspace at nowhere (no manifest.json)', 'Name the workspace folder']),
    ('no run', ["no training run 't9' in workspace ws", 'Its finished runs: t1']),
    ('unfinished', ["run 't2' has not finished (no metrics.json)", "Finish it first: runner.train('t2'), or treetrm "
                    'train --run-id t2']),
    ('other data', ["the questions given are not the ones run 't1' was trained on", 'treetrm report --data-dir']),
    ('other backend', ["run 't1' was trained on backend 'sim', not 'openai'", 'treetrm report --backend sim']),
    ('out is a folder', ['the report path is a folder', 'Give a file name'])])
def test_bad_input_says_what_to_do_and_writes_nothing(trained, workspace, tmp_path, monkeypatch, capsys, case, said):
    "The command's own `main`, in this process, from `tmp_path`: exit code 1, the message, no file written or changed."
    world = trained[0]
    monkeypatch.chdir(tmp_path)
    for role in ('agent', 'judge', 'evolver'):  # endpoints for backend 'openai' (never called)
        monkeypatch.setenv(f'TREETRM_{role.upper()}_MODEL', 'm')
        monkeypatch.setenv(f'TREETRM_{role.upper()}_BASE_URL', 'http://127.0.0.1:9/v1')
    words = {'no workspace': ['nowhere', 't1'], 'no run': ['ws', 't9', '--data-dir', world],
             'unfinished': ['ws', 'unfinished', '--data-dir', world], 'other data': ['ws', 't1'],
             'other backend': ['ws', 't1', '--data-dir', world, '--backend', 'openai'],
             'out is a folder': ['ws', 't1', '--data-dir', world, '-o', 'ws']}[case]
    if case == 'unfinished': words[1] = unfinished(workspace)
    before = files_of(tmp_path)
    assert main(['report', *map(str, words)]) == 1
    err = capsys.readouterr().err
    assert all(s in err for s in said) and files_of(tmp_path) == before, err
