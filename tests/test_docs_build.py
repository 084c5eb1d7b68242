"""The docs build (issue 52, item 2) runs a notebook as `nbdev_test` does — a cell that raises fails it,
`#| eval: false` and the skip flags of settings.ini are not run, `skip_exec` front matter runs nothing — and writes
the page a reader sees: outputs kept, nbdev's hidden and export-only cells left out, directive lines cut, the title cell
whole."""
import json, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

RUN_ONE = """import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location('docs_build', sys.argv[1])
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
print(json.dumps(build.execute(Path(sys.argv[2]), Path(sys.argv[3]))))
"""

def execute(nb:Path, dest:Path) -> tuple:
    "`build.execute` in a process of its own, as the build runs it: IPython's shell stays out of this test process."
    run = subprocess.run([sys.executable, '-c', RUN_ONE, str(ROOT/'docs'/'build.py'), str(nb), str(dest)],
                         capture_output=True, text=True, timeout=300, check=True)
    return tuple(json.loads(run.stdout.splitlines()[-1]))

def notebook(path:Path, *cells) -> Path:
    "A notebook of (cell type, source) pairs."
    nb = {'cells': [{'cell_type': t, 'metadata': {}, 'source': s, **({'outputs': [], 'execution_count': None}
                     if t == 'code' else {})} for t, s in cells],
          'metadata': {'kernelspec': {'name': 'python3', 'language': 'python', 'display_name': 'python3'}},
          'nbformat': 4, 'nbformat_minor': 5}
    path.write_text(json.dumps(nb))
    return path

def test_a_cell_that_raises_fails_the_notebook(tmp_path):
    nb = notebook(tmp_path/'bad.ipynb', ('markdown', '# Bad'), ('code', 'x = 1'), ('code', "raise ValueError('boom')"))
    ok, _, error = execute(nb, tmp_path/'out'/'bad.ipynb')
    assert not ok and 'boom' in error and 'ValueError' in error

def test_skipped_cells_and_the_page_a_reader_sees(tmp_path):
    nb = notebook(tmp_path/'good.ipynb',
                  ('markdown', '# Good\n\n> what it holds\n\nProse that stays.'),
                  ('code', '#| default_exp good'),
                  ('code', "#| eval: false\nraise ValueError('never run')"),
                  ('code', "#| slow\nraise ValueError('a skip flag of settings.ini')"),
                  ('code', '#| hide\nhidden = 2'),
                  ('code', '#| export\ndef f(): return 41'),
                  ('code', 'f() + 1'),
                  ('code', 'import nbdev\nnbdev.nbdev_export()'))
    ok, _, error = execute(nb, tmp_path/'out'/'good.ipynb')
    assert ok, error
    page = json.loads((tmp_path/'out'/'good.ipynb').read_text())
    sources = [''.join(c['source']) for c in page['cells']]
    assert sources[0] == '# Good\n\n> what it holds\n\nProse that stays.'  # nbdev's front matter step would drop it
    assert not [s for s in sources if '#|' in s or 'hidden' in s or 'nbdev_export' in s or 'default_exp' in s]
    shown = {''.join(c['source']): c.get('outputs') for c in page['cells'] if c['cell_type'] == 'code'}
    assert ''.join(shown['f() + 1'][0]['data']['text/plain']) == '42' and shown['def f(): return 41'] == []

def test_skip_exec_front_matter_runs_nothing(tmp_path):
    nb = notebook(tmp_path/'stage.ipynb', ('raw', '---\nskip_exec: true\n---'), ('markdown', '# Stage'),
                  ('code', "raise ValueError('a stage notebook runs through papermill, not here')"))
    assert execute(nb, tmp_path/'out'/'stage.ipynb')[0]

def test_the_build_runs_the_notebooks_nbdev_test_runs(docs_build):
    from nbdev.doclinks import nbglob
    assert docs_build.library_notebooks() == sorted(p.resolve() for p in nbglob(ROOT/'nbs', as_path=True))
    assert {p.name for p in docs_build.docs_notebooks()} >= {'regime-map.ipynb', 'noise.ipynb', 'server-fill.ipynb'}
