("The committed fixtures load in every format, agree with each other and with values written out here, "
 "and match their generator.")
import runpy
from pathlib import Path
import polars as pl
import pytest
from treetrm.data import (TASK_TYPES, Question, load_questions, build_units, unit_correct, option_letters, option_of,
                          option_text)
from treetrm.trees import load_tree, load_trees, node_summary, node_text

FIXTURES = Path(__file__).resolve().parents[1]/'data'/'fixtures'
VIDEOS = {'kT3vQx9LmPa': '001', 'Zp8rW2nHcYe': '002', 'b4QeLm7TsVu': '003'}

# Written out by hand from the fixture tables (question id -> task type, answer letter, text of the right option).
EXPECTED = {
    '001-1': ('Counting Problem', 'B', '3'),
    '001-2': ('OCR Problems', 'A', "BAKER'S BEST"),
    '001-3': ('Temporal Reasoning', 'C', 'Pours batter into a hot pan'),
    '001-4': ('Object Recognition', 'D', 'Blueberries'),
    '002-1': ('Attribute Perception', 'A', 'Red'),
    '002-2': ('Counting Problem', 'B', '2'),
    '002-3': ('Counting Problem', 'B', '1'),
    '002-4': ('Information Synopsis', 'B', 'A youth basketball game won by the red team'),
    '003-1': ('Spatial Perception', 'A', 'On a cliff to the left of the harbour'),
    '003-2': ('OCR Problems', 'B', '1884'),
    '003-3': ('Temporal Perception', 'C', 'In the second half'),
    '003-4': ('Action Reasoning', 'B', 'A storm is approaching'),
}

@pytest.fixture(scope='module')
def hf(): return load_questions(FIXTURES/'videomme_hf.parquet')

def test_hf_parquet_matches_hand_written_values(hf):
    got = {q.question_id: (q.task_type, q.answer, option_text(option_of(q, q.answer))) for q in hf}
    assert got == EXPECTED
    assert all(q.task_type in TASK_TYPES for q in hf)
    assert all(option_letters(q) == ('A', 'B', 'C', 'D') and [o[:3] for o in q.options] == ['A. ', 'B. ', 'C. ', 'D. ']
               for q in hf)

def test_hf_parquet_keeps_both_video_ids(hf):
    assert {q.video_id: q.video_number for q in hf} == VIDEOS
    q = hf[0]
    assert q == Question('001-1', 'kT3vQx9LmPa', 'Counting Problem', 'How many eggs does the cook crack into the bowl?',
                         ('A. 2', 'B. 3', 'C. 4', 'D. 6'), 'B', duration='short', domain='Life Record',
                         sub_category='Cooking', video_number='001')

def test_parquet_equals_json_and_the_raw_table(hf):
    assert load_questions(FIXTURES/'videomme_hf.json') == hf
    raw = pl.read_parquet(FIXTURES/'videomme_hf.parquet')
    assert raw['question_id'].to_list() == [q.question_id for q in hf]
    assert raw['options'].to_list() == [list(q.options) for q in hf]
    assert raw['answer'].to_list() == [q.answer for q in hf]

def test_other_formats_hold_the_same_questions(hf):
    core = lambda qs: sorted((q.question_id, q.video_id, q.task_type, q.question, q.options, q.answer) for q in qs)
    jl = load_questions(FIXTURES/'questions.jsonl')
    assert core(load_questions(FIXTURES/'per_video')) == core(hf) == core(jl)
    assert [q.question_id for q in jl if q.unit_id] == ['002-2', '002-3']

def test_units_from_jsonl():
    units = {u.unit_id: u for u in build_units(load_questions(FIXTURES/'questions.jsonl'))}
    assert len(units) == 11 and units['002-u1'].question_ids == ('002-2', '002-3')
    assert unit_correct(units['002-u1'], {'002-2': True, '002-3': True})
    assert not unit_correct(units['002-u1'], {'002-2': True, '002-3': False})

def test_trees_load_and_cover_the_questions(hf):
    trees = load_trees(FIXTURES/'trees')
    assert set(trees) == set(VIDEOS)
    for vid, t in trees.items():
        assert [len(t.level(i)) for i in (1, 2, 3)] == [2, 4, 8]
        assert len(t.roots) == 2 and all(t.node(r).parent_id is None for r in t.roots)
        assert all(node_summary(n) for n in t.nodes.values())
    for q in load_questions(FIXTURES/'questions.jsonl'):
        assert all(n in trees[q.video_id].nodes for n in q.source_nodes), q.question_id
    # the evidence for the OCR question is in the keyframe it names
    assert '1884' in node_text(trees['b4QeLm7TsVu'].node('b4QeLm7TsVu_L3_003'))

def test_fixtures_match_their_generator(tmp_path):
    runpy.run_path(str(FIXTURES/'make_fixtures.py'), run_name='fixtures')['main'](tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob('*') if p.is_file())
    committed = sorted(p.relative_to(FIXTURES) for p in FIXTURES.rglob('*')
                       if p.is_file() and p.name != 'make_fixtures.py' and '__pycache__' not in p.parts)
    assert made == committed
    for rel in made:
        if rel.suffix == '.parquet': assert pl.read_parquet(tmp_path/rel).equals(pl.read_parquet(FIXTURES/rel)), rel
        else: assert (tmp_path/rel).read_bytes() == (FIXTURES/rel).read_bytes(), rel
