"""Build treetrm's docs site from a checkout, offline: `python docs/build.py` (then open `_site/index.html`).

1. Execute the library notebooks as `nbdev_test` does (the same files, flags and skipped cells, in `nbs/` as the
   working folder) and the docs' own notebooks (the benchmark pages, which read the committed JSON of
   `nbs/bench/results/`), keeping their outputs: a notebook that errors fails the build, as it fails `nbdev_test`.
2. Render them with the pages of `docs/` through Sphinx (myst-nb for notebooks and MyST markdown, autosummary for the
   API reference from the docstrings); Sphinx's warnings (a missing page, a broken cross-reference) fail it.
3. Check every link and image of the built site: a link to a missing page or anchor fails it.

CI runs it in place of `nbdev_test` (`.ci/run`); `tests/test_docs_site.py` opens the pages in headless Chromium."""
from __future__ import annotations
import argparse, fnmatch, html.parser, json, multiprocessing, os, re, shutil, subprocess, sys, time, urllib.parse
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS, NBS = ROOT/'docs', ROOT/'nbs'
LIBRARY = 'library'  # where the library notebooks go in the site
RESULTS, FIGURES = 'nbs/bench/results', 'benchmarks/figures'  # committed results; where their PNGs go in the site
SKIP_DOCS = {'build.py', 'README.md', '__pycache__'}  # files of docs/ that are not pages

def library_notebooks() -> list[Path]:
    "The notebooks `nbdev_test` would run: nbdev's own selection (`nbglob`, settings.ini), sorted."
    from nbdev.doclinks import nbglob
    from nbdev.test import _keep_file
    return sorted(p.resolve() for p in nbglob(NBS, as_path=True) if _keep_file(p, '.notest'))

def docs_notebooks() -> list[Path]:
    "The docs' own notebooks (the benchmark pages)."
    return sorted(p.resolve() for p in DOCS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)

def site_path(nb:Path) -> Path:
    "Where a notebook's page goes, relative to the site's source folder."
    return nb.relative_to(DOCS) if nb.is_relative_to(DOCS) else Path(LIBRARY)/nb.relative_to(NBS)

# nbdev directives that leave a cell out of the page, and those that keep it with its input or output hidden
DROP = {'hide', 'default_exp', 'exporti'}
TAGS = {('echo', 'false'): 'remove-input', ('output', 'false'): 'remove-output', ('include', 'false'): 'remove-cell'}

def page_cells(nb) -> list[dict]:
    "The cells a reader sees: nbdev's front matter, hidden cells and `nbdev_export()` left out, directive lines cut."
    out = []
    for c in nb.cells:
        direc = {k.rstrip(':'): [str(v).lower() for v in vs] for k, vs in (getattr(c, 'directives_', {}) or {}).items()}
        if c.cell_type == 'raw' or DROP & direc.keys() or 'nbdev_export(' in c.source: continue
        d = {k: v for k, v in dict(c).items() if not k.endswith('_')}
        if c.cell_type == 'code':
            # nbdev cuts its own directives and keeps quarto's (`#| eval: false`): the page shows neither
            d['source'] = '\n'.join(l for l in c.source.split('\n') if not l.startswith('#|')).strip('\n')
            tags = [t for (k, v), t in TAGS.items() if direc.get(k, [''])[0] == v]
            if tags: d['metadata'] = {**d.get('metadata', {}), 'tags': tags}
            if not d['source'] and not d.get('outputs'): continue  # nothing but directives
        out.append(d)
    return out

def front_matter(nb) -> dict:
    "A notebook's YAML front matter (its first cell, raw, between `---` lines), as `nbdev_test` reads it."
    import yaml
    first = nb.cells[0] if nb.cells else None
    m = first is not None and first.cell_type == 'raw' and re.match(r'\s*---\s*\n(.*?)\n---', first.source, re.DOTALL)
    return (yaml.safe_load(m.group(1)) or {}) if m else {}

def execute(nb_path:Path, dest:Path, run:bool=True) -> tuple[bool, float, str]:
    "Execute a notebook as `nbdev_test` does (its skip flags, `#| eval: false`) and write its page with outputs."
    from execnb.nbio import nb2dict
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    os.environ['IN_TEST'] = '1'
    t0, nb = time.time(), NBProcessor(nb_path).nb  # directives read and cut from the code, prose left whole
    skip_exec = str(front_matter(nb).get('skip_exec', False)).lower() == 'true'
    flags = set(get_config().tst_flags.split())
    def skipped(cell):
        if cell.cell_type != 'code' or 'nbdev_export(' in cell.source: return True
        direc = getattr(cell, 'directives_', {}) or {}
        return direc.get('eval:', [''])[0].lower() == 'false' or bool(flags & direc.keys())
    error = ''
    if run and not skip_exec:
        if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
        shell = CaptureShell(nb_path)
        try:
            with working_directory(nb_path.parent): shell.run_all(nb, exc_stop=True, preproc=skipped)
        except Exception: error = shell.prettytb(fname=nb_path)
    page = {**{k: nb2dict(v, k) for k, v in dict(nb).items() if not k.endswith('_') and k != 'cells'},
            'cells': nb2dict(page_cells(nb))}
    for c in page['cells']:  # nbformat wants source as text lines and a cell id only from 4.5 on
        if isinstance(c.get('source'), str): c['source'] = c['source'].splitlines(True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(page, indent=1, ensure_ascii=False))
    return not error, time.time() - t0, error

def notebook_title(nb:Path) -> str:
    "The first `# ` heading of a notebook (its file name without one)."
    for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
        if c['cell_type'] == 'markdown' and (m := re.match(r'#\s+(.+)', ''.join(c['source']).lstrip())):
            return m.group(1).strip()
    return nb.stem

def library_index(notebooks:list[Path]) -> str:
    "The library's landing page: a table of contents of its notebooks, by room (the folders of `nbs/`)."
    rooms = {}
    for nb in notebooks: rooms.setdefault(nb.parent.relative_to(NBS).as_posix(), []).append(nb)
    lines = ['# The library notebooks', '',
             "Each module of treetrm is written in a notebook (nbdev): its prose, its code and the checks run on it, "
             "executed when this site was built. The rooms below follow the package's folders "
             "([the design](../design.md), section 2).", '']
    for room, nbs in sorted(rooms.items(), key=lambda r: (r[0] != '.', r[0])):
        name = 'top level' if room == '.' else f'`{room}/`'
        lines += ['```{toctree}', f':caption: {name}', ':maxdepth: 1', '',
                  *[site_path(nb).relative_to(LIBRARY).with_suffix('').as_posix() for nb in nbs], '```', '']
    return '\n'.join(lines)

def assemble(src:Path, notebooks:list[Path], execute_re:str|None, workers:int) -> list[str]:
    "Copy docs/ into `src`, execute the notebooks into it; the failures (notebook and traceback)."
    if src.exists(): shutil.rmtree(src)
    shutil.copytree(DOCS, src, ignore=lambda d, names: [n for n in names if n in SKIP_DOCS or n.endswith('.ipynb')])
    (src/LIBRARY).mkdir(parents=True, exist_ok=True)
    (src/FIGURES).mkdir(parents=True)  # the committed figures of the results, for the pages that show one as an image
    for f in (ROOT/RESULTS).glob('*.png'): shutil.copy2(f, src/FIGURES/f.name)
    (src/LIBRARY/'index.md').write_text(library_index([n for n in notebooks if not n.is_relative_to(DOCS)]))
    run = lambda nb: execute_re is None or bool(re.search(execute_re, nb.relative_to(ROOT).as_posix()))
    failures, done = [], 0
    # a fresh process for each notebook: IPython's shell takes over `__main__` in the process it runs in
    with ProcessPoolExecutor(max(1, workers), mp_context=multiprocessing.get_context('spawn'),
                             max_tasks_per_child=1) as pool:
        jobs = {pool.submit(execute, nb, src/site_path(nb), run(nb)): nb for nb in notebooks}
        for job in as_completed(jobs):
            nb, (ok, secs, error) = jobs[job], job.result()
            done += 1
            print(f'[{done}/{len(jobs)}] {nb.relative_to(ROOT)}: {secs:.0f} s{"" if ok else "  FAILED"}', flush=True)
            if not ok: failures.append(f'{nb.relative_to(ROOT)}\n{error}')
    return failures

class Links(html.parser.HTMLParser):
    "The links, images and element ids of one HTML page."
    def __init__(self):
        super().__init__()
        self.refs, self.ids = [], set()
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get('id'): self.ids.add(a['id'])
        if tag == 'a' and a.get('name'): self.ids.add(a['name'])
        for k in ('href', 'src'):
            if a.get(k) and not (tag == 'link' and a.get('rel') == 'canonical'): self.refs.append(a[k])

def page_links(page:Path) -> Links:
    "The links of a built page."
    p = Links()
    p.feed(page.read_text(encoding='utf-8', errors='replace'))
    return p

def broken_links(site:Path) -> list[str]:
    "Every internal link or image of the built site whose file or anchor is missing: 'page: link'."
    pages, problems = {p: page_links(p) for p in site.rglob('*.html')}, []
    for page, links in pages.items():
        for ref in links.refs:
            u = urllib.parse.urlsplit(ref)
            if u.scheme or ref.startswith(('//', 'mailto:', 'data:', 'javascript:')): continue
            target = (page.parent/urllib.parse.unquote(u.path)).resolve() if u.path else page
            if target.is_dir(): target = target/'index.html'
            where = f'{page.relative_to(site)}: {ref}'
            if not target.is_file(): problems.append(where + ' (no such file)')
            elif u.fragment and target.suffix == '.html':
                ids = pages[target].ids if target in pages else page_links(target).ids
                if urllib.parse.unquote(u.fragment) not in ids: problems.append(where + ' (no such anchor)')
    return problems

def build(out:Path=ROOT/'_site', work:Path=ROOT/'_site_work', workers:int=2, execute_re:str|None=None,
          only:str|None=None) -> Path:
    "Execute, render and check the site into `out` (the pages as Sphinx reads them in `work`); SystemExit on a failure."
    t0, src, html = time.time(), work/'src', work/'html'  # myst-nb keeps its output files beside html/
    notebooks = [*library_notebooks(), *docs_notebooks()]
    if only: notebooks = [n for n in notebooks if fnmatch.fnmatch(n.relative_to(ROOT).as_posix(), only)]
    failures = assemble(src, notebooks, execute_re, workers)
    if failures:
        raise SystemExit('docs: these notebooks failed (fix them, as for nbdev_test):\n\n' + '\n\n'.join(failures))
    print(f'docs: {len(notebooks)} notebooks in {time.time() - t0:.0f} s; rendering', flush=True)
    if html.exists(): shutil.rmtree(html)
    cmd = [sys.executable, '-m', 'sphinx', '-b', 'html', '-q', '-W', '--keep-going', '-j', str(max(1, workers)),
           '-c', str(DOCS), str(src), str(html)]
    if subprocess.run(cmd, cwd=ROOT).returncode: raise SystemExit('docs: Sphinx failed (its warnings above)')
    if problems := broken_links(html):
        raise SystemExit('docs: broken links in the built site:\n' + '\n'.join(problems))
    if out.exists(): shutil.rmtree(out)
    shutil.move(html, out)  # the site replaces the last one only once it is whole and checked
    print(f'docs: built {out} in {time.time() - t0:.0f} s; open {out/"index.html"}')
    return out

def main(argv=None):
    "The command line: `python docs/build.py [--out _site] [--workers 2] [--execute REGEX] [--only GLOB]`."
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--out', type=Path, default=ROOT/'_site', help='the built site (default: _site)')
    p.add_argument('--work', type=Path, default=ROOT/'_site_work',
                   help='the executed pages as Sphinx reads them, and its output (default: _site_work)')
    p.add_argument('--workers', type=int, default=2, help='notebooks executed at once, and Sphinx processes')
    p.add_argument('--execute', default=None, metavar='REGEX',
                   help='execute only notebooks whose path matches (the others render without outputs); default all')
    p.add_argument('--only', default=None, metavar='GLOB', help='build only these notebooks (a partial site)')
    a = p.parse_args(argv)
    build(a.out.resolve(), a.work.resolve(), a.workers, a.execute, a.only)

if __name__ == '__main__': main()
