("Bad-input corpus for questions and trees: every malformed file fails with a DataError that says where, "
 "and nothing is written.")
import json
from pathlib import Path
import pytest
from treetrm.core import DataError, TreeTrmError, sha256_file
from treetrm.data import load_questions
from treetrm.trees import load_tree

CORPUS = Path(__file__).resolve().parent/'bad_inputs'
LOADERS = {'questions': load_questions, 'trees': load_tree}

def expectations(kind):
    return json.loads((CORPUS/kind/'expect.json').read_text(encoding='utf-8'))

def cases():
    return [(kind, name, subs) for kind in LOADERS for name, subs in expectations(kind).items()]

def snapshot():
    "Every file (hidden ones too) under the question and tree corpora, with size, mtime and hash."
    return {str(p.relative_to(CORPUS)): (p.stat().st_size, p.stat().st_mtime_ns, sha256_file(p))
            for kind in LOADERS for p in sorted((CORPUS/kind).rglob('*'))
            if p.is_file() and '__pycache__' not in p.parts}

@pytest.mark.parametrize('kind', list(LOADERS))
def test_every_case_is_listed(kind):
    "Each file or folder of the corpus has an expectation, and each expectation has its file."
    folder, listed = CORPUS/kind, set(expectations(kind))
    present = {p.name for p in folder.iterdir() if p.name != 'expect.json' and not p.name.startswith(('_', '.'))}
    assert present == listed, f'unlisted: {sorted(present - listed)}, missing: {sorted(listed - present)}'

def test_corpus_is_big_enough():
    assert len(cases()) >= 16

@pytest.mark.parametrize('kind,name,subs', cases(), ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_fails_loudly(kind, name, subs):
    folder = CORPUS/kind
    before = snapshot()
    with pytest.raises(DataError) as info: LOADERS[kind](folder/name)
    assert isinstance(info.value, TreeTrmError)
    msg = str(info.value)
    for s in subs: assert s in msg, f'{kind}/{name}: {s!r} not in error message: {msg}'
    assert snapshot() == before, f'{kind}/{name}: the loader changed files in the corpus'
