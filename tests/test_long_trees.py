"""Trees of real size: a tree the builder makes from a long video (an event of 60 keyframes, a keyframe a second) runs
through the agent loop with every tool output bounded, because `view_node` pages long children lists and each page
names the call for the next; the committed JSON's summary is its rows' (the benchmark page's paragraph is
`long_trees_markdown` of it, at docs build time), and the how-to page's words match the code."""
import asyncio, json

import papermill as pm
import pytest

from treetrm.agent.navigate import run_agent
from treetrm.agent.tools import CHILDREN_PAGE_SIZE, node_pages, view_node
from treetrm.agent.skills import load_skill_dir
from treetrm.agent.versions import seed_skills_dir
from treetrm.bench.long_trees import PageReader, largest_view, long_video_tree, policy_summary
from treetrm.build.builder import BuildParams
from treetrm.core import project_root

ROOT = project_root()
RESULT = ROOT/'nbs'/'bench'/'results'/'long-trees-2026-12-07.json'
OWN_VIDEOS = (ROOT/'docs'/'howto'/'own-videos.md').read_text(encoding='utf-8')  # the how-to page
# The bound on one tool output. A page lists at most 15 children; a child line of a sim-vision tree is about 90
# characters (id, level, span, a one-sentence summary), so 15 lines and the node's own header, card and subtitle stay
# under 2,500 characters, while the unpaged list of a 60-keyframe event is 60 such lines, over 5,000.
BOUND = 2_500


@pytest.fixture(scope='module')
def long_tree(tmp_path_factory):
    "Two one-minute shots built with the default bounds: two scenes of one event, each event with 60 keyframes."
    return asyncio.run(long_video_tree(tmp_path_factory.mktemp('long'), shots=2, shot_s=60.0))


def child_lines(text: str) -> int: return sum(l.startswith('- ') for l in text.splitlines())


def test_the_built_tree_has_events_of_60_keyframes(long_tree):
    tree, _ = long_tree
    assert [len(e.children_ids) for e in tree.level(2)] == [60, 60]  # l2_max_s 60 / l3_step_s 1 (the defaults)
    assert largest_view(tree, per_page=10**9)['chars'] > 2 * BOUND  # listed whole, such an event is over the bound


def test_every_page_of_every_node_is_bounded(long_tree):
    tree, _ = long_tree
    views = [view_node(tree, i, p) for i, n in tree.nodes.items() for p in range(1, node_pages(n) + 1)]
    assert max(map(len, views)) <= BOUND
    assert len(views) == len(tree.nodes) + 2 * 3  # each event has 3 more pages (60 children, 15 a page)
    assert max(map(child_lines, views)) == CHILDREN_PAGE_SIZE


def test_the_agent_pages_through_a_60_keyframe_event_within_the_bound(long_tree):
    tree, questions = long_tree
    skills = load_skill_dir(seed_skills_dir())
    for q, event in zip(questions, tree.level(2)):
        r = asyncio.run(run_agent(q, tree, PageReader(pages=None), skills=skills))
        assert (r.stop_reason, r.prediction) == ('finished', q.answer)
        pages = [s.args.get('page', 1) for s in r.steps if s.tool == 'view_node' and s.args['node_id'] == event.node_id]
        assert pages == [1, 2, 3, 4]  # the reader followed each page's pointer to the last page
        outputs = [s.output for s in r.steps]
        assert max(map(len, outputs)) <= BOUND and max(map(child_lines, outputs)) <= CHILDREN_PAGE_SIZE
        lines = [l for o in outputs for l in o.splitlines()]
        listed = [l.split(' | ')[0][2:] for l in lines if l.startswith(f'- {tree.video_id}_L3')]
        assert listed == list(event.children_ids)  # every keyframe listed once, in order


def test_the_json_and_the_how_to_page_agree_with_the_code():
    m = json.loads(RESULT.read_text())
    assert m['summary'] == policy_summary(m['rows'])  # the table's means are the rows'
    assert m['children_page_size'] == CHILDREN_PAGE_SIZE
    assert f'.CHILDREN_PAGE_SIZE` ({CHILDREN_PAGE_SIZE})' in OWN_VIDEOS
    params = BuildParams()
    assert params.l2_max_s / params.l3_step_s == 60 and params.l1_max_s / params.l2_max_s == 10  # the page's words


@pytest.mark.slow
@pytest.mark.notebooks
def test_the_benchmark_notebook_measures_what_the_json_holds(tmp_path):
    "The stage notebook run again with the committed parameters gives the committed JSON, apart from its time."
    m = json.loads(RESULT.read_text())
    out = tmp_path/'long-trees.json'
    pm.execute_notebook(str(ROOT/'nbs'/'bench'/'long_trees.ipynb'), str(tmp_path/'out.ipynb'), kernel_name='python3',
                        cwd=str(ROOT/'nbs'), progress_bar=False,
                        parameters={'shots': m['parameters']['shots'], 'shot_s': m['parameters']['shot_s'],
                                    'workdir': str(tmp_path/'work'), 'out': str(out)})
    again = json.loads(out.read_text())
    assert {k: v for k, v in again.items() if k != 'seconds'} == {k: v for k, v in m.items() if k != 'seconds'}
