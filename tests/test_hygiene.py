"Notebook hygiene: library notebooks export a module, stage notebooks are papermill-ready and committed clean."
import json
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/'nbs'
STAGE = {'split.ipynb', 'train.ipynb', 'eval.ipynb', 'build.ipynb'}

def cells(nb_path): return json.loads(nb_path.read_text())['cells']
def all_notebooks(): return sorted(p for p in NBS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
def is_stage(p): return p.name in STAGE or p.parent.name == 'bench'

def test_library_notebooks_export_a_module():
    libs = [p for p in all_notebooks() if not is_stage(p) and p.name != 'index.ipynb']
    assert libs, 'no library notebooks found'
    for p in libs:
        first = ''.join(cells(p)[0]['source'])
        assert '#| default_exp' in first, f'{p.name}: the first cell must be `#| default_exp <module>`'

@pytest.mark.parametrize('nb', [p for p in all_notebooks()], ids=lambda p: p.name)
def test_no_asyncio_run(nb):
    src = '\n'.join(''.join(c['source']) for c in cells(nb) if c['cell_type'] == 'code')
    assert 'asyncio.run(' not in src, f'{nb.name}: use top-level await, never asyncio.run'

def stage_notebooks(): return [p for p in all_notebooks() if is_stage(p)]

@pytest.mark.parametrize('nb', stage_notebooks(), ids=lambda p: p.name)
def test_stage_notebook_shape(nb):
    cs = cells(nb)
    assert cs[0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(cs[0]['source']), f'{nb.name}: first cell must be raw skip_exec front matter'
    tagged = [c for c in cs if 'parameters' in c.get('metadata', {}).get('tags', [])]
    assert len(tagged) == 1, f'{nb.name}: exactly one cell tagged `parameters`'
    assert not any(c.get('outputs') for c in cs if c['cell_type'] == 'code'), f'{nb.name}: commit without outputs'
    assert json.loads(nb.read_text())['metadata']['kernelspec']['name'] == 'python3'
