"Bad skill files and bad edits: each is refused with a message naming the file and field, and nothing on disk changes."
import json, shutil
from pathlib import Path
import pytest
from treetrm.core import DataError, sha256_file
from treetrm.data import TASK_TYPES
from treetrm.agent.skills import DEFAULT_SKILL, load_skill_dir, route_skills, skill_file, strategy_rules, render_skill
from treetrm.agent.edits import EditRejected, REJECT_REASONS, apply_edit

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT/'tests'/'bad_inputs'/'skills'
FIXTURE = CORPUS/'fixture'
EXPECT = json.loads((CORPUS/'expect.json').read_text())
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_file() and p.name != 'expect.json')

def snapshot(folder: Path) -> dict[str, str]:
    "sha256 of every file under `folder`, by relative path."
    return {str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob('*')) if p.is_file()}

def check_message(err: Exception, case: str):
    msg = str(err)
    for needle in EXPECT[case]: assert needle in msg, f'{case}: {needle!r} not in {msg!r}'
    assert ('file=' in msg or case.startswith('schema-missing-target')
            or case.startswith('schema-not-an-object')), f'{case}: no file named in {msg!r}'
    assert 'field=' in msg or 'section=' in msg, f'{case}: no field or section named in {msg!r}'

def test_corpus_is_complete():
    assert set(CASES) == set(EXPECT), f'cases without expectations or the reverse: {set(CASES) ^ set(EXPECT)}'
    assert sum(c.endswith('.json') for c in CASES) >= 10 and sum(c.endswith('.md') for c in CASES) >= 3
    assert len(load_skill_dir(FIXTURE)) == 3  # the fixture itself is valid

@pytest.mark.parametrize('case', [c for c in CASES if c.endswith('.json')])
def test_bad_edit_is_rejected(case, tmp_path):
    version = tmp_path/'v1'
    shutil.copytree(FIXTURE, version)
    before, fixture_before = snapshot(tmp_path), snapshot(FIXTURE)
    edit = json.loads((CORPUS/case).read_text())
    with pytest.raises(EditRejected) as info: apply_edit(version, edit)
    assert isinstance(info.value, DataError) and info.value.reason in REJECT_REASONS
    check_message(info.value, case)
    assert snapshot(tmp_path) == before and snapshot(FIXTURE) == fixture_before

@pytest.mark.parametrize('case', [c for c in CASES if c.endswith('.md')])
def test_bad_skill_file_is_refused(case, tmp_path):
    version = tmp_path/'v1'
    shutil.copytree(FIXTURE, version)
    shutil.copy(CORPUS/case, version/case)
    before = snapshot(tmp_path)
    with pytest.raises(DataError) as info: load_skill_dir(version)
    check_message(info.value, case)
    assert snapshot(tmp_path) == before

def test_good_edit_on_fixture_passes(tmp_path):
    "The same machinery accepts a sound edit, so the rejections above are not an always-raise."
    version = tmp_path/'v1'
    shutil.copytree(FIXTURE, version)
    before = snapshot(tmp_path)
    new = apply_edit(version, {'target': 'counting-problem.md', 'ops': [
        {'op': 'append_to_section', 'section': 'Strategy', 'text': '- Count each event once.'}]})
    assert new.count('- Count each event once.') == 1 and snapshot(tmp_path) == before

def test_seed_skills_route_each_task_type():
    seeds = load_skill_dir(ROOT/'prompts'/'skills')
    assert len(seeds) == 13 and DEFAULT_SKILL in seeds
    for tt in TASK_TYPES:
        route = route_skills(seeds, tt, 'auto')
        assert route.routed_file == skill_file(tt) and not route.fallback, tt
    for name, skill in seeds.items():
        assert 2 <= len(strategy_rules(skill)) <= 4, name
        assert [s.heading for s in skill.sections if s.frozen] == ['Answering'], name
        assert render_skill(skill) == (ROOT/'prompts'/'skills'/name).read_text(), name
