"""Every fenced block of README.md and of the docs pages (docs/**/*.md) runs in a test, read from its page (issue 32:
"the README's commands run in a test as written, through papermill, on a clean clone"; issue 52: the how-to pages), or
is listed with the reason it cannot run in CI. `RUN_BY` maps a block's page and marker (its first line, without a
trailing comment) to the test that runs it; `NOT_RUN` gives the reason for the rest; a new block with neither fails
`test_every_readme_block_is_run_or_excused` with what to do. A docs page may repeat a README block word for word (the
quick start, the developing commands): the README's entry covers the copy, and a copy that differs needs its own.

This file runs its blocks in a folder laid out as a checkout (`checkout`: settings.ini, nbs, prompts, the demo world
and the environment as `.venv`, `TREETRM_ROOT` pointing at it), so relative paths resolve there as they would for a
user, and nothing lands in this checkout's workspaces. Blocks that name an endpoint talk to
`treetrm.sim.server.SimServer` through the `TREETRM_<ROLE>_*` variables, over data made at the paths the command names.
The two training commands of "Use your own model" and "Use your own data" get small-run parameters appended after the
pages' words (as tests/test_one_test_number.py does): as written they train the full default configuration, which
needs a world of 50 videos and took 195 s over HTTP."""
import hashlib, json, os, re, shlex, shutil, subprocess, sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import papermill as pm
import polars as pl
import pytest

from treetrm.bench import loop_bench
from treetrm.train.settings import load_config
from treetrm.core import project_root, read_json
from treetrm.data import load_questions
from treetrm.trees import load_tree
from treetrm.log import HarnessLog
from treetrm.sim.world import make_world
from treetrm.sim.server import serve
from treetrm.build.video import make_synthetic_videos, parse_subtitles, synthetic_shots

ROOT = project_root()
README = ROOT/'README.md'
OWN_MODEL, OWN_DATA, OWN_VIDEOS = 'docs/howto/own-model.md', 'docs/howto/own-data.md', 'docs/howto/own-videos.md'
LOCAL_MODEL, RAY, CONFIGURATION = 'docs/howto/local-model.md', 'docs/howto/ray.md', 'docs/howto/configuration.md'
HERE = 'tests/test_readme_commands.py'
SMALL = ['-p', 'epochs', '1', '-p', 'min_ladder_units', '4', '-p', 'batch_size', '8', '-p', 'patience', '1',
         '-p', 'concurrency', '4', '-p', 'show_steps', 'False']  # appended to the full training commands

CONFIGURATION_TEST = 'tests/test_stage_parameters.py::test_readme_configuration_command_runs_through_papermill'
RUN_BY = {  # (a page, a block's marker) -> the test that runs it, reading the block from that page
    # the quick start: .ci/run makes the venv and installs the dev extra as it says; the test runs the papermill part
    ('README.md', "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "
                  ".venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v1"):
        'tests/test_one_test_number.py::test_eval_shows_the_train_stages_final_test',
    ('README.md', 'from treetrm import Runner'): f'{HERE}::test_notebook_form_runs_in_a_kernel',
    ('README.md', 'import asyncio'): f'{HERE}::test_script_form_runs_as_a_script',
    ('README.md', 'treetrm train --run-id v2 -p epochs 3 --config my.yaml'):
        f'{HERE}::test_treetrm_commands_run_as_written',
    (OWN_MODEL, 'TREETRM_AGENT_MODEL=Qwen/Qwen2.5-7B-Instruct'):
        f'{HERE}::test_env_file_and_prices_reach_the_split_forecast',
    (OWN_MODEL, '.venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v1 -p backend openai'):
        f'{HERE}::test_own_model_training_command_over_http',
    (OWN_DATA, '.venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v1 -p backend openai '
               '-p workspace workspaces/mine'): f'{HERE}::test_own_data_training_command_reads_videomme_files',
    (OWN_VIDEOS, '.venv/bin/papermill nbs/build.ipynb out.ipynb -k python3 -p backend openai '
                 '-p videos data/videomme/videos'): f'{HERE}::test_build_command_over_http',
    (RAY, 'papermill nbs/bench/loop.ipynb out.ipynb -k python3'):
        f'{HERE}::test_reduced_benchmark_grid_runs_as_written',
    (CONFIGURATION, 'skill_mode: auto'): CONFIGURATION_TEST,
    (CONFIGURATION, ".venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v3 -p config my.yaml "
                    "-p epochs 4 -p settings \"{'train.gate.tau': 0.1}\""): CONFIGURATION_TEST,
}
NOT_RUN = {  # (a page, a block's marker) -> why no test runs it
    ('docs/design.md', 'nbs/        nbdev notebooks — the source of truth: library notebooks (nbs/NN_name.ipynb, '
                       'nbs/<package>/NN_name.ipynb),'): 'a picture of the layout, not a command',
    (RAY, 'from treetrm import run_grid, full_grid, cell_budget'):
        'the full grid on a Ray cluster and a sweep on the user\'s endpoints; the same calls run small on a real '
        'two-node Ray cluster in tests/test_ray.py (run_grid and sweep with an address) and tests/test_sweep.py',
    ('docs/howto/gepa-dspy.md', 'import gepa'):
        'a sketch with the user\'s adapter and data; the same calls run in nbs/integrations/00_gepa.ipynb '
        '(nbdev_test: gepa.optimize with EValueAcceptance, then confirm_best) and nbs/examples/dspy_gepa.ipynb '
        '(tests/test_gepa_integration.py)',
    ('README.md', "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python docs/build.py && "
                  ".venv/bin/pytest -q tests"):
        'the CI command itself: .ci/run makes the venv, installs the dev extra, builds the docs site (which executes '
        'the notebooks as nbdev_test does) and runs pytest',
    ('README.md', '.venv/bin/pytest -q tests -m "not slow and not ray and not real_model"'):
        'the test tiers themselves: a test that ran them would run this suite inside itself (the fast tier is '
        'what a developer runs before a commit, the full tier is what .ci/run runs)',
    (LOCAL_MODEL, 'python3 -m venv .venv-llama'):
        'compiles llama.cpp (10-15 min on 2 cores) and serves a real model on port 8080; CI builds the same server '
        '(.ci/run) and tests/test_real_model.py runs split, train and eval on it (its own world and config); '
        'test_local_model_recipe_data_and_config runs the recipe\'s world and small.yaml lines',
}


@dataclass(frozen=True)
class Block:
    "A fenced block of a page (README.md or a docs page)."
    line: int  # the line of its opening fence
    lang: str  # its info string (bash, python, yaml, ...)
    text: str  # its lines, each ending in a newline
    page: str = 'README.md'  # the page it is on, a path from the project root

    @property
    def marker(self) -> str:
        "Its first line without a trailing comment, a line continuation or the indentation."
        return re.sub(r'\s+#.*$|\s*\\$', '', self.text.splitlines()[0]).strip()

    @property
    def key(self) -> tuple[str, str]:
        "Its page and marker: the key of `RUN_BY` and `NOT_RUN`."
        return self.page, self.marker


def readme_blocks(text: str, page: str = 'README.md') -> list[Block]:
    "Every fenced block of a page's text, in order; a MyST directive (```{toctree}) is the site's structure, not one."
    return [Block(text[:m.start()].count('\n') + 1, m['lang'], m['text'], page)
            for m in re.finditer(r'^```(?P<lang>[^\n`]*)\n(?P<text>.*?)^```', text, re.S | re.M)
            if not m['lang'].startswith('{')]


def pages() -> dict[str, str]:
    "Page (a path from the project root) -> its text: README.md and every markdown page under docs/."
    docs = sorted((ROOT/'docs').rglob('*.md'))
    return {'README.md': README.read_text(encoding='utf-8')} | {
        str(p.relative_to(ROOT)): p.read_text(encoding='utf-8') for p in docs}


def page_block(page: str, marker: str) -> str:
    "The text of the block with this marker on `page` (a KeyError naming both when the page has none)."
    found = {b.marker: b.text for b in readme_blocks((ROOT/page).read_text(encoding='utf-8'), page)}
    if marker not in found: raise KeyError(f'{page} has no block whose first line is {marker!r}')
    return found[marker]


def readme_block(marker: str) -> str:
    "The text of the README block with this marker (a KeyError naming it when the README has none)."
    return page_block('README.md', marker)


def copied_lines(test_file: Path, block: Block) -> list[str]:
    "The block's lines that a test file holds word for word (a copy instead of a read); the registry's markers aside."
    source, markers = test_file.read_text(encoding='utf-8'), {m for _, m in RUN_BY.keys() | NOT_RUN.keys()}
    lines = {l.strip() for l in block.text.splitlines()} - markers
    return sorted(l for l in lines if len(l) >= 30 and l in source)


def runner_problems(block: Block, test_id: str) -> list[str]:
    "What is wrong with the test registered to run `block`: missing, not reading its page, or holding a copy."
    file, name = test_id.split('::')
    path = ROOT/file
    if not path.is_file(): return [f'{test_id}: no such file (the test registered for {block.page} line {block.line})']
    source = path.read_text(encoding='utf-8')
    problems = [] if re.search(rf'^(async )?def {name}\(', source, re.M) else [f'{test_id}: no such test']
    if Path(block.page).name not in source: problems.append(f'{file} does not read {block.page}')
    if copy := copied_lines(path, block): problems.append(f'{file} holds a copy of {block.page} line(s) {copy}')
    return problems


def unlisted(b: Block) -> str:
    "What to do about a block that no test runs and no reason excuses."
    return (f'{b.page} line {b.line}: the ```{b.lang} block starting {b.marker!r} is not run by any test. Add a test '
            f'that reads it from {b.page} and runs it, and map ({b.page!r}, marker) to it in RUN_BY in {HERE}, or '
            f'give the reason it cannot run in CI in NOT_RUN there (a copy of a README block needs no entry when '
            f'it is the same word for word)')


def inventory_problems(texts: dict[str, str]) -> list[str]:
    "Every block of these pages that no test runs and no reason excuses, stale entries, and broken registered tests."
    readme = {b.text for b in readme_blocks(texts.get('README.md', ''))}
    problems, seen = [], {}
    for page, text in texts.items():
        for b in readme_blocks(text, page):
            if b.key in seen: problems.append(f'{page} lines {seen[b.key]} and {b.line}: two blocks start with '
                                              f'{b.marker!r}; give one another first line')
            seen[b.key] = b.line
            if b.key in RUN_BY: problems += runner_problems(b, RUN_BY[b.key])
            elif b.key not in NOT_RUN and not (page != 'README.md' and b.text in readme): problems.append(unlisted(b))
    stale = (RUN_BY.keys() | NOT_RUN.keys()) - seen.keys()
    return problems + [f'{HERE}: no block of {p} starts with {m!r}; update or remove its entry'
                       for p, m in sorted(stale)]


def test_every_readme_block_is_run_or_excused():
    assert not (RUN_BY.keys() & NOT_RUN.keys())
    texts = pages()
    assert {'README.md', OWN_MODEL, CONFIGURATION, 'docs/quickstart.md'} <= texts.keys()  # the docs pages are read
    problems = inventory_problems(texts)
    assert not problems, '\n'.join(problems)


def test_a_new_block_without_an_entry_fails_saying_what_to_do():
    texts, new = pages(), '\n```bash\ntreetrm frobnicate --all   # new\n```\n'
    (problem, ) = inventory_problems(texts | {'README.md': texts['README.md'] + new})
    assert "README.md line" in problem and "starting 'treetrm frobnicate --all' is not run by any test" in problem
    assert 'RUN_BY' in problem and 'NOT_RUN' in problem and HERE in problem
    (problem, ) = inventory_problems(texts | {OWN_DATA: texts[OWN_DATA] + new})  # the same on a docs page, named
    assert problem.startswith(f'{OWN_DATA} line') and 'frobnicate' in problem
    config = texts[CONFIGURATION]
    renamed = config.replace('```yaml\nskill_mode: auto', '```yaml\nskill_mode: manual')
    stale = inventory_problems(texts | {CONFIGURATION: renamed})
    assert any('no block of' in p and CONFIGURATION in p and 'skill_mode: auto' in p for p in stale)


def test_a_docs_copy_of_a_readme_block_is_covered_only_word_for_word():
    texts = pages()
    quick = texts['docs/quickstart.md']
    assert readme_block('import asyncio') in quick  # the quick start page repeats the README's blocks
    changed = quick.replace("'v1', 'artifact'", "'v1', 'elsewhere'")
    problems = inventory_problems(texts | {'docs/quickstart.md': changed})
    assert len(problems) == 2 and all(p.startswith('docs/quickstart.md line') for p in problems), problems


def training_runs(texts: dict[str, str]) -> list[tuple[str, str, str, dict]]:
    "(page and line, workspace, run id, the other parameters) of each training command in the pages' bash blocks."
    runs = []
    for b in (b for page, text in texts.items() for b in readme_blocks(text, page)):
        if b.lang != 'bash': continue
        for command in b.text.replace('\\\n', ' ').splitlines():
            words = shlex.split(command, comments=True)
            if 'nbs/train.ipynb' not in words and words[:2] != ['treetrm', 'train']: continue
            given = {words[k + 1]: words[k + 2] for k, w in enumerate(words) if w == '-p'}
            options = {'--run-id': 'run_id', '--config': 'config'}  # the treetrm command's names of two parameters
            given |= {options[w]: words[k + 1] for k, w in enumerate(words) if w in options}
            where = f'{b.page} line {b.line}'
            runs.append((where, given.pop('workspace', 'workspaces/demo'), given.pop('run_id', 'v1'), given))
    return runs


def test_training_commands_on_one_run_do_not_clash():
    ("A newcomer runs the README's and the docs pages' training commands on the demo workspace one after another "
     "(issue 51, item 13): two that share a run id must ask for the same run, or the second is refused on resume")
    runs = [r for r in training_runs(pages()) if r[1] == 'workspaces/demo']
    assert len(runs) >= 3, runs  # the quick start, the treetrm command, the configuration section
    first = {}
    for line, _, run_id, given in runs:
        seen = first.setdefault(run_id, (line, given))
        assert seen[1] == given, (f'{seen[0]} and {line} both train run {run_id!r} of the demo workspace '
                                  f'with other parameters ({seen[1]} and {given}): give the second its own run id')


RULE_FAMILIES = ('gate', 'gepa', 'greedy', 'oracle', 'fixed_n', 'bayes')


def benchmark_rule_names(text: str) -> set[str]:
    "The rule names a page's prose writes in backticks: snake_case names of the rule families."
    prose = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    words = set(re.findall(r'`([a-z][a-z0-9_]*)`', prose))
    return {w for w in words if any(w == f or w.startswith(f'{f}_') for f in RULE_FAMILIES)}


def test_pages_name_only_rules_that_exist():
    "The README and the docs pages name benchmark rules by their registry names (design.md names tables and columns)."
    texts = {p: t for p, t in pages().items() if p != 'docs/design.md'}
    names = set().union(*map(benchmark_rule_names, texts.values()))
    assert {'gate_a05', 'gepa_engine_gated'} <= names  # the check reads the pages' rule names
    known = (set(loop_bench.BENCH_RULES) | set(loop_bench.ABLATIONS) | set(loop_bench.CEILINGS)
             | set(loop_bench.ENGINE_RULES))
    assert not names - known, f'rule names not in loop_bench: {sorted(names - known)}'
    assert benchmark_rule_names('the `gate_bogus` rule and `gate_a05`') - known == {'gate_bogus'}  # a wrong name shows


def clean_env(**more) -> dict:
    "This process's environment without TREETRM_ settings, this environment's scripts first on PATH, plus `more`."
    env = {k: v for k, v in os.environ.items() if not k.startswith('TREETRM_')}
    return env | {'PATH': f'{Path(sys.executable).parent}{os.pathsep}{env.get("PATH", "")}'} | more


@pytest.fixture
def checkout(tmp_path) -> Path:
    "A folder laid out as a treetrm checkout (links to this one's notebooks, prompts, demo world and environment)."
    root = tmp_path/'checkout'
    (root/'data').mkdir(parents=True)
    shutil.copy(ROOT/'settings.ini', root)
    for name in ('nbs', 'prompts', 'data/demo'): (root/name).symlink_to(ROOT/name)
    (root/'.venv').symlink_to(Path(sys.prefix))
    return root


def run_bash(text: str, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    "Run README text with bash in `cwd`, stopping at the first failing command; it must succeed."
    done = subprocess.run(['bash', '-e', '-c', text], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f'{text}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}'
    return done


def notebook_text(path: Path) -> str:
    "The text and plain-text outputs of an executed notebook."
    cells = json.loads(path.read_text())['cells']
    outputs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    return ''.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for o in outputs)


def check_artifact(folder: Path, run_dir: Path):
    "An exported artifact holds the run's metrics, and its manifest's sha256 of every file is the file's."
    assert read_json(folder/'metrics.json') == read_json(run_dir/'metrics.json')
    listed = read_json(folder/'manifest.json')['files']
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob('*') if p.is_file()}
    assert set(listed) == on_disk - {'manifest.json'} and 'provenance.json' in listed
    for name, sha in listed.items(): assert hashlib.sha256((folder/name).read_bytes()).hexdigest() == sha, name


@pytest.mark.notebooks
@pytest.mark.slow
def test_script_form_runs_as_a_script(tmp_path):
    "`python train.py` from an empty folder: the demo trains, a bar shows steps and an ETA, the run is exported."
    (tmp_path/'train.py').write_text(readme_block('import asyncio'))
    done = subprocess.run([sys.executable, 'train.py'], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r'train v1: .*\| *\d+/\d+ \[\d+:\d+<\d+:\d+', done.stderr)  # planned steps, elapsed<remaining
    check_artifact(tmp_path/'artifact', tmp_path/'my_ws'/'runs'/'v1')


@pytest.mark.notebooks
@pytest.mark.slow
def test_notebook_form_runs_in_a_kernel(tmp_path):
    "The notebook form as one cell of a notebook (top-level await), executed from an empty folder."
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(readme_block('from treetrm import Runner'))])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}
    nbformat.write(nb, tmp_path/'form.ipynb')
    pm.execute_notebook(str(tmp_path/'form.ipynb'), str(tmp_path/'out.ipynb'), kernel_name='python3',
                        cwd=str(tmp_path), progress_bar=False)
    outputs = json.loads((tmp_path/'out.ipynb').read_text())['cells'][0]['outputs']
    shown = [''.join(o.get('data', {}).get('text/markdown', '')) for o in outputs]
    assert any(s.startswith('### v1 · step ') for s in shown) and any(s.startswith('### v1 · epoch ') for s in shown)
    assert any('image/png' in o.get('data', {}) for o in outputs)  # the reports' figures, inline
    check_artifact(tmp_path/'artifact', tmp_path/'my_ws'/'runs'/'v1')


@pytest.mark.notebooks
@pytest.mark.slow
def test_treetrm_commands_run_as_written(checkout):
    "The `treetrm` block word for word in a checkout, `my.yaml` being the YAML of configuration.md."
    block = readme_block('treetrm train --run-id v2 -p epochs 3 --config my.yaml')
    (checkout/'my.yaml').write_text(page_block(CONFIGURATION, 'skill_mode: auto'))
    done = run_bash(block, checkout, clean_env(TREETRM_ROOT=str(checkout)))
    reports = re.findall(r'# report: (\S+)', block)
    assert len(reports) == 2 and all((checkout/r).is_file() for r in reports)  # where the comments say
    frozen = read_json(checkout/'workspaces'/'demo'/'runs'/'v2'/'checkpoint.json')['state']['structural']['config']
    assert (frozen['epochs'], frozen['max_calls'], frozen['gate']['alpha']) == (3, 20000, 0.05)  # -p and my.yaml
    assert "the train stage's final test" in notebook_text(checkout/reports[1])
    stages = re.search(r'# the stages \(([^)]*)\)', block)[1].split(', ')
    assert all(f'{s} (nbs/{s}.ipynb):' in done.stdout for s in stages) and len(stages) == 4
    page = (checkout/re.search(r'# one page: (\S+)', block)[1]).read_text()  # `treetrm report`: the run as one page
    assert 'id="step-e1s1"' in page and 'src="data:image/png;base64,' in page  # its steps, its figures inside it


def price_names() -> list[str]:
    "The price variables' suffixes, from own-model.md's table of optional per-role variables."
    (row, ) = [l for l in (ROOT/OWN_MODEL).read_text(encoding='utf-8').splitlines() if l.startswith('| `_PRICE_IN`')]
    return re.findall(r'`(_PRICE_\w+)`', row.split('|')[1])


@pytest.mark.notebooks
@pytest.mark.slow
def test_env_file_and_prices_reach_the_split_forecast(checkout):
    "own-model.md's `.env` at the project root, prices by the table's variables: the split's dry run costs the roles."
    (price_in, price_out, _cached) = price_names()
    judge_prices = f'TREETRM_JUDGE{price_in}=0.27\nTREETRM_JUDGE{price_out}=1.10\n'  # .env too, as the issue asks
    (checkout/'.env').write_text(page_block(OWN_MODEL, 'TREETRM_AGENT_MODEL=Qwen/Qwen2.5-7B-Instruct') + judge_prices)
    env = clean_env(TREETRM_ROOT=str(checkout), **{f'TREETRM_AGENT{price_in}': '0.5', f'TREETRM_AGENT{price_out}': '2'})
    run_bash('.venv/bin/papermill nbs/split.ipynb out.ipynb -k python3 -p backend openai -p dry_run True',
             checkout, env, timeout=300)
    shown = notebook_text(checkout/'out.ipynb')
    assert "agent model 'Qwen/Qwen2.5-7B-Instruct'" in shown and "judge 'deepseek-chat'" in shown  # read from .env
    for role, per_million in (('agent', 0.5), ('judge', 0.27)):  # the forecast counts input tokens only
        tokens, cost = re.search(rf'{role} +[\d,]+ calls +([\d,]+) tokens +cost ([\d.]+) USD', shown).groups()
        assert float(cost) == round(int(tokens.replace(',', '')) * per_million / 1e6, 4) > 0
    assert 'sk-...' not in shown  # the keys are not shown
    log = HarnessLog(checkout/'workspaces'/'demo'/'harness.db')
    try: assert log.frame('llm_calls').height == 0  # a dry run calls no model
    finally: log.close()


def sim_roles_env(url: str, roles=('agent', 'judge', 'evolver')) -> dict:
    "The `TREETRM_<ROLE>_*` variables that send each role to the sim server's model of that role."
    return {f'TREETRM_{r.upper()}_{k}': v for r in roles
            for k, v in (('MODEL', f'sim-{r}'), ('BASE_URL', url), ('API_KEY', 'sk-readme-test'))}


def check_trained_over_http(ws: Path, srv, n_questions: int):
    "The run finished, every question had a baseline answer, and every model call went to the sim server."
    assert read_json(ws/'runs'/'v1'/'metrics.json')['run_id'] == 'v1'
    log = HarnessLog(ws/'harness.db')
    try:
        base, calls = log.predictions('baseline'), log.frame('llm_calls')
        assert base.height == n_questions and not base['stop_reason'].is_in(['error', 'parse_error']).any()
        assert set(calls['model']) == {'sim-agent', 'sim-judge', 'sim-evolver'}
        assert srv.stats['ok'] == calls.filter(pl.col('status') == 'ok').height > 0
    finally: log.close()


@pytest.mark.notebooks
@pytest.mark.slow
def test_own_model_training_command_over_http(checkout):
    "The `backend openai` command on a sim world at data/mybench, every role served over HTTP."
    world = make_world(checkout/'data'/'mybench', seed=0, n_videos=8)
    block = page_block(OWN_MODEL, '.venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v1 '
                                  '-p backend openai')
    with serve(world_dir=world) as srv:
        run_bash(block.rstrip() + ' ' + ' '.join(SMALL), checkout,
                 clean_env(TREETRM_ROOT=str(checkout), **sim_roles_env(srv.base_url)))
        check_trained_over_http(checkout/'workspaces'/'mine', srv, len(load_questions(world/'questions.jsonl')))
    assert (checkout/'out.ipynb').is_file()


def write_videomme_parquet(questions_jsonl: Path, out: Path) -> Path:
    "Questions written as Hugging Face Video-MME's parquet: its columns, `videoID` the tree key."
    rows = [dict(video_id=f'{i:03d}', videoID=q.video_id, question_id=q.question_id, task_type=q.task_type,
                 question=q.question, options=list(q.options), answer=q.answer)
            for i, q in enumerate(load_questions(questions_jsonl), 1)]
    out.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(out)
    return out


@pytest.mark.notebooks
@pytest.mark.slow
def test_own_data_training_command_reads_videomme_files(checkout, tmp_path):
    "The Video-MME command on a parquet and trees at the paths it names, every role served over HTTP."
    world, videomme = make_world(tmp_path/'world', seed=0, n_videos=8), checkout/'data'/'videomme'
    write_videomme_parquet(world/'questions.jsonl', videomme/'test-00000-of-00001.parquet')
    shutil.copytree(world/'trees', videomme/'trees')
    block = page_block(OWN_DATA, '.venv/bin/papermill nbs/train.ipynb out.ipynb -k python3 -p run_id v1 '
                                 '-p backend openai -p workspace workspaces/mine')
    with serve(world_dir=world) as srv:
        run_bash(block.rstrip() + ' ' + ' '.join(SMALL), checkout,
                 clean_env(TREETRM_ROOT=str(checkout), **sim_roles_env(srv.base_url)))
        check_trained_over_http(checkout/'workspaces'/'mine', srv, len(load_questions(world/'questions.jsonl')))


@pytest.mark.notebooks
@pytest.mark.slow
def test_build_command_over_http(checkout):
    "The build command word for word on two clips, their parquet and subtitles, the vision role over HTTP."
    videomme = checkout/'data'/'videomme'
    videos = make_synthetic_videos(videomme/'videos', n_videos=2, n_shots=2, seconds=6.0)
    write_videomme_parquet(videos/'questions.jsonl', videomme/'test-00000-of-00001.parquet')
    (videos/'questions.jsonl').unlink()
    (videomme/'subtitles').mkdir()
    for srt in videos.glob('*.srt'): srt.rename(videomme/'subtitles'/srt.name)
    block = page_block(OWN_VIDEOS, '.venv/bin/papermill nbs/build.ipynb out.ipynb -k python3 -p backend openai '
                                   '-p videos data/videomme/videos')
    with serve() as srv:
        run_bash(block, checkout, clean_env(TREETRM_ROOT=str(checkout), **sim_roles_env(srv.base_url, ('vision', ))))
        assert srv.stats['ok'] > 0
    for v in range(2):
        tree, shots = load_tree(videomme/'trees'/f'synth{v:02d}'), synthetic_shots(v, 2, 6.0)
        assert [e.card['visible_text'] for e in tree.level(2)] == [s.text for s in shots]  # read by sim-vision
        cues = parse_subtitles(videomme/'subtitles'/f'synth{v:02d}.srt')
        assert all(any(c.text in n.subtitle for n in tree.level(2)) for c in cues)  # from the subtitles folder


def test_local_model_recipe_data_and_config(tmp_path):
    "The llama.cpp recipe's lines that need no server: its world has the questions it says, small.yaml is a config."
    block = page_block(LOCAL_MODEL, 'python3 -m venv .venv-llama')
    world_line = next(l for l in block.splitlines() if 'treetrm.sim.server world' in l)
    yaml_part = block[block.index('cat > small.yaml'):block.index('\nYAML\n') + len('\nYAML\n')]
    (tmp_path/'.venv').symlink_to(Path(sys.prefix))
    run_bash(world_line + '\n' + yaml_part, tmp_path, clean_env())
    said = int(re.search(r'# (\d+) questions', world_line)[1])
    assert len(load_questions(tmp_path/'data'/'small'/'questions.jsonl')) == said
    config = load_config(tmp_path/'small.yaml')
    assert (config.train.epochs, config.train.max_steps, config.split.test_ratio) == (1, 1, 0.34)


@pytest.mark.notebooks
@pytest.mark.slow
def test_reduced_benchmark_grid_runs_as_written(checkout):
    ("ray.md's loop benchmark block's first line word for word in a checkout: the reduced grid, one cell, 3 world "
     "seeds, every rule. Its second line is the same notebook with `-p full True` (12 cells × 10 seeds: hours, a "
     "benchmark run).")
    block = page_block(RAY, 'papermill nbs/bench/loop.ipynb out.ipynb -k python3')
    reduced, full = block.splitlines()[:2]
    assert full.startswith(reduced.split('#')[0].strip() + ' -p full True')
    params = set(re.findall(r'^(\w+) = ', ''.join(next(c.source for c in nbformat.read(
        ROOT/'nbs'/'bench'/'loop.ipynb', as_version=4).cells if 'parameters' in c.metadata.get('tags', []))), re.M))
    assert {'full', 'pair_seeds', 'noise'} <= params and set(re.findall(r' -p (\w+) ', block)) <= params
    run_bash(reduced, checkout, clean_env(TREETRM_ROOT=str(checkout)), timeout=1800)
    summary = read_json(checkout/'workspaces'/'bench'/'loop.json')  # where the notebook's `out` says
    (cell, ) = summary['cells']
    assert cell['seeds'] == [0, 1, 2] and set(cell['rules']) == set(loop_bench.BENCH_RULES)
    assert (checkout/'out.ipynb').is_file()
