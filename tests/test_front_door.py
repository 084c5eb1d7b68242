"""The front door (issue 52, item 1): `import treetrm; help(treetrm)` shows a map of the package and the names a user
starts from; each starting name is its home module's object and loads only that module."""
import importlib, pkgutil, re, subprocess, sys
import treetrm

def help_text() -> str:
    "What `python -c 'import treetrm; help(treetrm)'` prints, as a newcomer runs it."
    run = subprocess.run([sys.executable, '-c', 'import treetrm; help(treetrm)'], capture_output=True, text=True,
                         env={'PAGER': 'cat', 'TERM': 'dumb', 'PATH': ''}, check=True)
    return run.stdout

def mapped_rooms(text:str) -> set[str]:
    "The rooms the package map names: the first column of each line after 'a line per room' ('agent/' -> 'agent')."
    block = re.split(r'\n\s*\n', text.split('a line per room', 1)[1])[1]  # the map, up to its first blank line
    cols = [re.split(r'\s{2,}', l.strip())[0] for l in block.splitlines() if l.strip()]
    return {n.strip().rstrip('/') for c in cols for n in c.split(',')}

def test_help_shows_the_map_and_the_starting_names():
    text = help_text()
    rooms = {m.name for m in pkgutil.iter_modules(treetrm.__path__) if not m.name.startswith('_')}
    assert len(rooms) > 20 and not rooms - mapped_rooms(text), f'not on the map: {rooms - mapped_rooms(text)}'
    assert not [n for n in treetrm.STARTING_NAMES if not re.search(rf'\b{n}\b', text)]

def test_starting_names_are_their_homes_objects():
    for name, home in treetrm.STARTING_NAMES.items():
        assert getattr(treetrm, name) is getattr(importlib.import_module(f'treetrm.{home}'), name), name
    assert set(treetrm.__all__) >= set(treetrm.STARTING_NAMES)

def test_import_is_lazy_and_a_typo_is_an_attribute_error():
    check = ("import sys, treetrm\n"
             "assert not [m for m in sys.modules if m.startswith(('treetrm.train', 'treetrm.sim', 'treetrm.bench'))]\n"
             "from treetrm import make_world\n"
             "assert 'treetrm.sim.world' in sys.modules and 'treetrm.train.runner' not in sys.modules\n"
             "try: treetrm.Runer\n"
             "except AttributeError as e: print(e)\n")
    out = subprocess.run([sys.executable, '-c', check], capture_output=True, text=True, check=True).stdout
    assert "has no attribute 'Runer'" in out
