"""Every import path of treetrm 0.0.1 (and of the first subpackage layout) keeps working for one release (issue 36):
each public name of each 0.0.1 module
(tests/api_0.0.1.json: the `__all__` of every module at commit ce38b8b, the last 0.0.1 layout) is reachable under its
old module path, and an old path that is no module of this release warns (FutureWarning) naming the module the name
lives in now (a module that still exists may hand out a name it imports without a warning); no module of this release
uses an old path (importing all of them warns nothing)."""
import json, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API = json.loads((ROOT/'tests'/'api_0.0.1.json').read_text())
# the `__all__` of every module of the first subpackage layout (f64e279), before issue 46 named the rooms anew
LAYOUT_API = json.loads((ROOT/'tests'/'api_layout_f64e279.json').read_text())

PROBE = r'''
import importlib, json, pkgutil, sys, warnings
import treetrm

def future(record): return [str(w.message) for w in record if w.category is FutureWarning]

def home_of(note):
    "'treetrm.a moved to treetrm.b.c; ...' -> ('a', 'b.c')"
    old, new = note.split(';')[0].split(' moved to ')
    return old.removeprefix('treetrm.'), new.removeprefix('treetrm.')

report = dict(internal=[], missing=[], silent=[], wrong=[])
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter('always')
    for m in pkgutil.walk_packages(treetrm.__path__, 'treetrm.'):
        if m.name != 'treetrm.__main__': importlib.import_module(m.name)
report['internal'] = future(seen)
for old, names in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        module = importlib.import_module('treetrm.' + old)
    at_import = future(seen)
    kept = module.__name__ == 'treetrm.' + old
    for name in names:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter('always')
            try: obj = getattr(module, name)
            except AttributeError as e:
                report['missing'].append(f'{old}.{name}: {e}')
                continue
        notes = at_import + future(seen)
        if not notes and not kept: report['silent'].append(f'{old}.{name}')  # a kept module may still import it
        for note in notes:
            was, now = home_of(note)
            where, attr = (now, name) if was == old else now.rsplit('.', 1)
            if getattr(importlib.import_module('treetrm.' + where), attr) is not obj:
                report['wrong'].append(f'{old}.{name}: {note}')
print(json.dumps(report))
'''

def probe(api=API) -> dict:
    done = subprocess.run([sys.executable, '-c', PROBE, json.dumps(api)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])

def test_every_0_0_1_name_is_reachable_by_its_old_path_with_a_warning():
    report = probe()
    assert not report['internal'], f'modules of this release import old paths: {report["internal"][:5]}'
    assert not report['missing'], f'{len(report["missing"])} 0.0.1 names are gone: {report["missing"][:10]}'
    assert not report['silent'], f'old paths that do not warn: {report["silent"][:10]}'
    assert not report['wrong'], f'warnings that name the wrong home: {report["wrong"][:10]}'

def test_every_name_of_the_first_subpackage_layout_is_reachable_by_its_path():
    "Issue 46 moved modules again (train.config -> train.settings, gate.exits -> gate.decision, ...): those paths work."
    report = probe(LAYOUT_API)
    assert not report['missing'], f'{len(report["missing"])} names are gone: {report["missing"][:10]}'
    assert not report['silent'], f'old paths that do not warn: {report["silent"][:10]}'
    assert not report['wrong'], f'warnings that name the wrong home: {report["wrong"][:10]}'

def test_the_issue_examples():
    code = '''
import warnings
warnings.simplefilter("error", FutureWarning)
for line in ("from treetrm.runner import Runner", "import treetrm.sim; treetrm.sim.make_world",
             "from treetrm.build import build_tree", "from treetrm.loop_bench import run_grid"):
    try: exec(line)
    except FutureWarning as w: print(str(w).split(";")[0])
'''
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ['treetrm.runner.Runner moved to treetrm.train.runner.Runner',
                                        'treetrm.sim.make_world moved to treetrm.sim.world.make_world',
                                        'treetrm.build.build_tree moved to treetrm.build.builder.build_tree',
                                        'treetrm.loop_bench.run_grid moved to treetrm.bench.loop_bench.run_grid'], \
        done.stdout
