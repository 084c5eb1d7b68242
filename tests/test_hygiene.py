"Notebook hygiene: library notebooks export a module, stage notebooks are papermill-ready and committed clean."
import json
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/'nbs'
STAGE = {'split.ipynb', 'train.ipynb', 'eval.ipynb', 'build.ipynb'}

def cells(nb_path): return json.loads(nb_path.read_text())['cells']
def all_notebooks(): return sorted(p for p in NBS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
def is_stage(p):
    ("A stage, benchmark or example notebook (library notebooks are numbered: "
     "nbs/bench/02_loop_bench.ipynb is the benchmark's code).")
    return p.name in STAGE or p.parent.name in ('bench', 'examples') and not p.name[0].isdigit()

def test_library_notebooks_export_a_module():
    libs = [p for p in all_notebooks() if not is_stage(p)]
    assert libs, 'no library notebooks found'
    for p in libs:
        first = ''.join(cells(p)[0]['source'])
        assert '#| default_exp' in first, f'{p.name}: the first cell must be `#| default_exp <module>`'

@pytest.mark.parametrize('nb', [p for p in all_notebooks()], ids=lambda p: p.name)
def test_no_asyncio_run(nb):
    src = '\n'.join(''.join(c['source']) for c in cells(nb) if c['cell_type'] == 'code')
    assert 'asyncio.run(' not in src, f'{nb.name}: use top-level await, never asyncio.run'

@pytest.mark.parametrize('nb', all_notebooks(), ids=lambda p: p.name)
def test_no_committed_outputs(nb):
    "A committed output would have to be what the code prints today: none are kept, so none can go stale (issue 36)."
    kept = [k for k, c in enumerate(cells(nb))
            if c['cell_type'] == 'code' and (c.get('outputs') or c.get('execution_count'))]
    assert not kept, f'{nb.name}: cells {kept} hold outputs; clear them (Jupyter: Edit > Clear Outputs of All Cells)'

def stage_notebooks(): return [p for p in all_notebooks() if is_stage(p)]

@pytest.mark.parametrize('nb', stage_notebooks(), ids=lambda p: p.name)
def test_stage_notebook_shape(nb):
    cs = cells(nb)
    assert cs[0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(cs[0]['source']), (
        f'{nb.name}: first cell must be raw skip_exec front matter')
    tagged = [c for c in cs if 'parameters' in c.get('metadata', {}).get('tags', [])]
    assert len(tagged) == 1, f'{nb.name}: exactly one cell tagged `parameters`'
    assert not any(c.get('outputs') for c in cs if c['cell_type'] == 'code'), f'{nb.name}: commit without outputs'
    assert json.loads(nb.read_text())['metadata']['kernelspec']['name'] == 'python3'


# The shape of the code (issue 16): layers, sizes, one statement per line, and the simulator behind the registry.
import ast, io, re, tokenize

PKG = ROOT/'treetrm'
# The layers, lowest first: a top-level module or a subpackage
# (whose modules follow their notebooks' order in nbs/<pkg>/).
UNITS = ('core', 'data', 'trees', 'log_schema', 'log', 'executors', 'figures', 'intervals', 'report_io', 'llm',
         'build', 'sim', 'agent', 'gate', 'proposers', 'split', 'integrations', 'report', 'usage', 'train', 'bench',
         'cli', '__main__', 'old_names', '__init__')
SIM_SIDE = ('sim', 'bench')  # the simulator itself and the benchmarks may import it

def library_notebooks():
    return [p for p in all_notebooks() if not is_stage(p)]

def module_order():
    "module name ('gate.evalues') -> (its layer, its notebook's path below nbs), for every library notebook"
    order = {}
    for p in library_notebooks():
        m = re.search(r'#\|\s*default_exp\s+(\S+)', ''.join(cells(p)[0]['source']))
        if m: order[m.group(1)] = (UNITS.index(m.group(1).split('.')[0]), str(p.relative_to(NBS)))
    return order

def module_path(module):
    "The file of a treetrm module name ('gate.evalues', '__init__')."
    return PKG/(module.replace('.', '/') + '.py')

def treetrm_imports(path):
    "Names below treetrm of the modules imported by the module at `path` (relative imports resolved)."
    here = ['treetrm', *path.relative_to(PKG).with_suffix('').parts]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            name = '.'.join(here[:-node.level] + ([node.module] if node.module else []))
            if name != 'treetrm': yield name.removeprefix('treetrm.')
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('treetrm.'):
            yield node.module.removeprefix('treetrm.')
        elif isinstance(node, ast.Import):
            yield from (a.name.removeprefix('treetrm.') for a in node.names if a.name.startswith('treetrm.'))

def test_every_library_module_has_a_layer():
    names = [p.name for p in library_notebooks()]
    bad = [p.name for p in library_notebooks()
           if (m := re.search(r'#\|\s*default_exp\s+(\S+)', ''.join(cells(p)[0]['source'])))
           and m.group(1).split('.')[0] not in UNITS]
    assert names and not bad, f'place these modules in UNITS (tests/test_hygiene.py): {bad}'

def test_no_module_imports_upward():
    order = module_order()
    bad = [f'{m} ({nb}) imports {n} ({order[n][1]})' for m, (i, nb) in order.items()
           for n in treetrm_imports(module_path(m)) if n in order and order[n] > (i, nb)]
    assert not bad, ('a module may import only lower layers and, in its own package, notebooks that sort before '
                     'its own:\n' + '\n'.join(bad))

def test_no_module_imports_an_old_name():
    "Inside treetrm every import names a module of this release (a notebook's module), never a 0.0.1 name (`HOMES`)."
    order = module_order()
    bad = [f'{m} imports {n}' for m in order for n in treetrm_imports(module_path(m)) if n not in order]
    assert not bad, ('import the module a name lives in now (treetrm.old_names.HOMES has the old names):\n'
                     + '\n'.join(bad))

def test_production_code_reaches_the_simulator_only_through_the_registry():
    order = module_order()
    sim = {m for m in order if m.startswith('sim.')}
    bad = [f'{m} imports {n}' for m in order if m.split('.')[0] not in SIM_SIDE for n in treetrm_imports(module_path(m))
           if n in sim]
    assert sim and not bad, ('choose a backend with treetrm.llm.backends.make_providers, never by importing the '
                             'simulator:\n' + '\n'.join(bad))

def library_files():
    return sorted(p for p in PKG.rglob('*.py') if p.name != '_modidx.py' and '__pycache__' not in p.parts)

def test_no_library_module_over_500_lines():
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in library_files()}
    assert sizes and not {k: v for k, v in sizes.items() if v > 500}, {k: v for k, v in sizes.items() if v > 500}

def test_no_function_over_40_lines():
    "Counted from `def` to the function's last line (decorators excluded)."
    long = [f'{p.relative_to(PKG)}: {n.name} ({n.end_lineno - n.lineno + 1} lines)' for p in library_files()
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > 40]
    assert not long, 'split these functions (at most 40 lines each):\n' + '\n'.join(long)

def public_defs(body, owner=''):
    "(qualified name, node) of the public functions, classes and methods in `body`."
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not n.name.startswith('_'):
            yield owner + n.name, n
            if isinstance(n, ast.ClassDef): yield from public_defs(n.body, f'{owner}{n.name}.')

def test_every_public_name_says_what_it_promises():
    bare = [f'{p.relative_to(PKG)}: {name}' for p in library_files()
            for name, n in public_defs(ast.parse(p.read_text()).body) if not ast.get_docstring(n)]
    assert not bare, 'give these a docstring (what it promises):\n' + '\n'.join(bare)

def test_no_private_name_crosses_a_module():
    crossing = [f'{p.relative_to(PKG)} imports {a.name}' for p in library_files()
                for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ImportFrom)
                for a in n.names if a.name.startswith('_') and not a.name.startswith('__')]
    assert not crossing, 'make these public (a name, a docstring) or keep them in one module:\n' + '\n'.join(crossing)

def semicolons(code):
    "Line numbers of `;` tokens (statements joined on one line) in `code`."
    return [t.start[0] for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type == tokenize.OP and t.string == ';']

@pytest.mark.parametrize('nb', all_notebooks(), ids=lambda p: p.name)
def test_one_statement_per_line_within_120_columns(nb):
    long, joined = [], []
    for k, c in enumerate(cells(nb)):
        if c['cell_type'] != 'code': continue
        code = ''.join(c['source'])
        long += [f'cell {k}: {l[:60]}…' for l in code.split('\n') if len(l) > 120]
        joined += [f'cell {k}, line {n}' for n in semicolons(code)]
    assert not long, f'{nb.name}: lines over 120 columns:\n' + '\n'.join(long)
    assert not joined, f'{nb.name}: statements joined with ";":\n' + '\n'.join(joined)

# The tests keep the same rules as the library (issue 36): one statement per line, at most 120 columns.
TESTS = ROOT/'tests'

def layout_problems(code):
    "(line number, what is wrong) for each line over 120 columns and each `;` joining statements in `code`."
    long = [(n, f'{len(l)} columns (at most 120)') for n, l in enumerate(code.split('\n'), 1) if len(l) > 120]
    joined = [(n, 'statements joined with ";" (one statement per line)') for n in semicolons(code)]
    return sorted(long + joined)

@pytest.mark.parametrize('path', sorted(TESTS.glob('*.py')), ids=lambda p: p.name)
def test_test_files_one_statement_per_line_within_120_columns(path):
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bad = [f'{where}:{n}: {why}' for n, why in layout_problems(path.read_text())]
    assert not bad, f'{where}: split joined statements and wrap long lines:\n' + '\n'.join(bad)

# The design is in the repository (issue 46): every reference to it names a section of docs/design.md.
DESIGN = ROOT/'docs'/'design.md'
DESIGN_REF = re.compile(r'docs/design\.md\s+§(\d+)(?:\s*[–-]\s*§?(\d+))?')  # "docs/design.md §8", "… §6–§9"
OLD_DESIGN_REF = re.compile(r'\bDESIGN(?:\.md)?\s*§')  # the team's old name for it, outside the repository

def design_sections(text):
    "Section numbers N of the `## N. Title` headings of the design document."
    return {int(n) for n in re.findall(r'^## (\d+)\. \S', text, flags=re.M)}

def design_reference_problems(texts, design_text):
    "'where: what' for each reference in `texts` (name -> text) to a missing section, and each old-style reference."
    sections, bad = design_sections(design_text), []
    for name, text in texts.items():
        for m in DESIGN_REF.finditer(text):
            low = int(m.group(1))
            high = int(m.group(2) or low)
            bad += [f'{name}: {m.group(0)!r} names § {n}, which has no heading' for n in range(low, high + 1)
                    if n not in sections]
        bad += [f'{name}: {m.group(0)!r} is the old name; write docs/design.md §N'
                for m in OLD_DESIGN_REF.finditer(text)]
    return bad

def notebook_text(path):
    "Every cell's source of a notebook, cells separated by blank lines."
    return '\n\n'.join(''.join(c['source']) for c in cells(path))

def design_citing_texts():
    "name -> text of every notebook, library module, test, README.md and docs page (docs/**/*.md)."
    texts = {str(p.relative_to(ROOT)): notebook_text(p) for p in all_notebooks()}
    files = [*library_files(), *sorted(TESTS.glob('*.py')), ROOT/'README.md', *sorted((ROOT/'docs').rglob('*.md'))]
    return texts | {str(p.relative_to(ROOT)): p.read_text(encoding='utf-8') for p in files}

def test_design_sections_are_numbered_in_order():
    "Each section heading is `## N. Title`, numbered 1, 2, 3, … so that a reference keeps its meaning."
    headings = re.findall(r'^## .*$', DESIGN.read_text(encoding='utf-8'), flags=re.M)
    numbers = [int(m.group(1)) if (m := re.match(r'## (\d+)\. \S', h)) else None for h in headings]
    assert numbers == list(range(1, len(headings) + 1)), f'number the sections of {DESIGN.name} 1, 2, …: {headings}'

def test_every_design_reference_names_a_section():
    bad = design_reference_problems(design_citing_texts(), DESIGN.read_text(encoding='utf-8'))
    assert not bad, 'point these at a section heading of docs/design.md:\n' + '\n'.join(bad)

def test_the_design_reference_check_finds_a_broken_reference():
    design = '# d\n\n## 1. One\n\n## 2. Two\n'
    cite = 'docs/design.md'  # kept apart from its section numbers, so the real check does not read these
    texts = {'ok': f'see {cite} §1 and {cite} §1–§2', 'missing': f'{cite} §99', 'range': f'{cite}\n§2–§3',
             'old': 'the gate (DESIGN' + ' §7) and DESIGN.md' + ' §3'}
    bad = design_reference_problems(texts, design)
    assert [b.split(':')[0] for b in bad] == ['missing', 'range', 'old', 'old'], bad

def test_settings_are_resolved_in_one_module():
    "Only train.settings builds a `TrainConfig` or a `Config` from user input (`train_config`, `load_config`)."
    made = re.compile(r'(?<![\w.])(TrainConfig|Config)\(')
    others = [p for p in library_files() if p.relative_to(PKG).as_posix() != 'train/settings.py']
    bad = [f'{p.relative_to(PKG)}:{i}' for p in others
           for i, line in enumerate(p.read_text().splitlines(), 1) if made.search(line.split('#')[0])]
    assert not bad, 'resolve settings with treetrm.train.settings (train_config, load_config):\n' + '\n'.join(bad)

FENCE = re.compile(r'<!-- [\w-]+:(?:begin|end) -->')  # the fences of a generated block: '<!-- regime-map:begin -->'

def page_texts() -> str:
    "README.md and every docs page (markdown and notebooks), where a generated block could live."
    docs = ROOT/'docs'
    markdown = [p.read_text(encoding='utf-8') for p in [ROOT/'README.md', *sorted(docs.rglob('*.md'))]]
    return '\n'.join(markdown + [notebook_text(p) for p in sorted(docs.rglob('*.ipynb'))])

def test_no_module_keeps_the_fences_of_a_block_no_page_holds():
    ("A block's fences in the library are for a page that holds that block; the README's generated blocks went to the "
     "docs' benchmark pages (made from the committed JSON by the `*_markdown` functions), and their fences with them.")
    pages = page_texts()
    stale = sorted({f'{p.relative_to(PKG)}: {f}' for p in library_files() for f in FENCE.findall(p.read_text())
                    if f not in pages})
    assert not stale, 'fences of a block no page holds (remove them and the code that reads them):\n' + '\n'.join(stale)
