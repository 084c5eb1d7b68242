"""The agent's telemetry (`agent_telemetry`, nbs/agent/03a_telemetry): a sim run writes one row per answered question,
its numbers agree with the stored trace counted here another way, and a training step's report shows the summary."""
import asyncio, contextlib, io, json, re, shutil
from pathlib import Path

import polars as pl
import pytest

from treetrm.core import project_root
from treetrm.data import load_questions, skill_slug
from treetrm.log import HarnessLog, TrainRunId, gate_step
from treetrm.agent.inference import run_inference
from treetrm.agent.telemetry import step_telemetry
from treetrm.sim.generator import type_rule_specs
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.world import make_world
from treetrm.sim.roles import make_role
from treetrm.llm.protocol import LLMResponse
from treetrm.train.runner import Runner

NODE_HEADER = re.compile(r'^\[node\] (\S+) \| L(\d) ', re.M)  # the first line of a view_node output
FRAME_LINE = re.compile(r'^(\S+) \| [\d.]+-[\d.]+s$', re.M)  # a keyframe block's first line in observe_frame output
FOLLOWED = ('cite_node_ids', 'open_all_l3')  # rules added to the skills, so answers cite nodes and open keyframes


def skills_with_rules(out:Path, task_types:set, skip:str) -> Path:
    "The seed skills, each type's file (but `skip`'s) given the sentences of the `FOLLOWED` rules the sim agent obeys."
    shutil.copytree(project_root()/'prompts'/'skills', out)
    for t in task_types - {skip}:
        rules = [r['text'] for r in type_rule_specs(t) if r['behaviour'] in FOLLOWED]
        f = out/f'{skill_slug(t)}.md'
        f.write_text(f.read_text() + '\n' + '\n'.join(f'- {r}' for r in rules) + '\n')
    return out


@pytest.fixture(scope='module')
def sim_run(tmp_path_factory):
    "A sim-backend inference run over a 4-video world: (its harness log, the questions, the skipped type)."
    root = tmp_path_factory.mktemp('telemetry')
    world = make_world(root/'world', seed=2, n_videos=4)
    qs = load_questions(world/'questions.jsonl')
    skip = sorted({q.task_type for q in qs})[0]
    skills = skills_with_rules(root/'skills', {q.task_type for q in qs}, skip)
    log = HarnessLog(root/'harness.db')
    asyncio.run(run_inference(qs, trees_dir=world/'trees', provider=SimAgent(world), log=log, run_id='r',
                              skills_dir=skills, progress=False))
    yield log, qs, skip
    log.close()


def counted_from_trace(steps:list, evidence:str, video_id:str, answered:bool) -> dict:
    "The telemetry of one question counted from its stored turns by reading the tool outputs' text, not the tree."
    opened = {1: set(), 2: set(), 3: set()}
    frames, observe_calls, text_frames = [], 0, 0
    for s in steps:
        if s['tool'] == 'view_node' and s['counted']:
            node, level = NODE_HEADER.search(s['output']).groups()
            opened[int(level)].add(node)
        if s['tool'] == 'observe_frame' and s['output']:
            observe_calls += 1
            shown = FRAME_LINE.findall(s['output']) if s['counted'] else []
            frames += shown
            text_frames += len(shown) if 'text fallback' in s['output'] else 0
    cited = set(re.findall(rf'{re.escape(video_id)}_L\d_\d+', evidence))
    seen = set().union(*opened.values(), frames)
    anchor = ('no_answer' if not answered else 'uncited' if not cited else
              'anchored' if cited <= seen else 'unopened')
    return dict(l1_opened=len(opened[1]), l2_opened=len(opened[2]), l3_opened=len(opened[3]),
                reached_l3=bool(opened[3] or frames), observe_calls=observe_calls, frames_asked=len(frames),
                frames_text=text_frames, cited=len(cited), anchor=anchor)


def test_a_sim_run_writes_one_telemetry_row_per_answer_that_its_trace_agrees_with(sim_run):
    log, qs, skip = sim_run
    p = log.predictions('r')
    tel = {r['question_id']: r for r in log.frame('agent_telemetry', 'r').to_dicts()}
    assert p.height == len(qs) and set(tel) == set(p['question_id'])  # every answered question has its row
    evidence = {r['question_id']: json.loads(r['content'])['evidence']
                for r in log.frame('traces', 'r', step=-1).to_dicts()}
    type_of = {q.question_id: q.task_type for q in qs}
    for row in p.to_dicts():
        want = counted_from_trace(json.loads(row['steps_json']), evidence[row['question_id']], row['video_id'],
                                  row['prediction'] is not None)
        got = tel[row['question_id']]
        assert {k: got[k] for k in want} == want, row['question_id']
        assert got['frames_asked'] == got['frames_vision'] + got['frames_text'] + got['frames_failed']
        if type_of[row['question_id']] == skip: assert got['anchor'] == 'uncited'  # its skill asks for no node ids
    rows = list(tel.values())
    # the run exercised what is checked: keyframes reached and not, answers anchored and uncited, frames looked at
    assert {r['reached_l3'] for r in rows} == {True, False}
    assert {'anchored', 'uncited'} <= {r['anchor'] for r in rows}
    assert sum(r['frames_asked'] for r in rows) > 0 and sum(r['l2_opened'] for r in rows) > 0


TRAIN = {'split': {'val_wrong_min': 0, 'epsilon': 1.0},
         'train': {'epochs': 1, 'min_ladder_units': 1, 'batch': {'batch_size': 6, 'min_class': 1}}}


class NotAnEdit:
    "An evolver whose every proposal is rejected before the gate (its reply is not JSON): no step is gated."
    model = 'sim-evolver'
    async def chat(self, messages, **kw):
        return LLMResponse('no idea', usage={'prompt_tokens': 1, 'completion_tokens': 1}, model=self.model)


def expected_summary(log:HarnessLog, run_id:str) -> list[tuple]:
    "(task type, outcome, n, share reaching L3, mean scenes opened) per type, wrong first, counted from the rows."
    tel = {r['question_id']: r for r in log.frame('agent_telemetry', run_id).to_dicts()}
    groups = {}
    for p in log.predictions(run_id).to_dicts():
        groups.setdefault((p['task_type'], 'right' if p['correct'] else 'wrong'), []).append(tel[p['question_id']])
    mean = lambda g, c, digits: round(sum(r[c] for r in g) / len(g), digits)  # as the summary rounds
    return [(t, o, len(g), mean(g, 'reached_l3', 3), mean(g, 'l1_opened', 2))
            for (t, o), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] == 'right'))]


@pytest.mark.parametrize('gated', [True, False])
def test_every_step_report_shows_how_the_agent_searched_in_its_rollout(tmp_path, gated):
    world = make_world(tmp_path/'world', seed=5, n_videos=10, questions_per_video={'Counting Problem': 1,
                                                                                  'OCR Problems': 1})
    roles = {} if gated else {'providers': {'agent': SimAgent(world), 'judge': make_role('sim-judge', world),
                                            'evolver': NotAnEdit()}}
    r = Runner(tmp_path/'ws', data_dir=world, progress=False, concurrency=4, config=TRAIN, **roles)
    with contextlib.redirect_stdout(io.StringIO()) as out: res = asyncio.run(r.train('v1', show=True))
    said, rid = out.getvalue(), res.internal_run_id
    steps = sorted({d['gate_id'] for d in res.state.decisions if gate_step(d['gate_id'])[1] is not None})
    assert steps and bool(r.gated_steps(rid)) == gated
    for gid in steps:
        step_text = said.split(f'v1 · step {gid}\n', 1)[1].split('v1 · ', 1)[0]  # this step's printed report
        assert 'agent_telemetry\n' in step_text and 'telemetry_notes\n' in step_text, step_text[:2000]
        assert ('gate_table\n' in step_text) == gated
        shown = step_telemetry(r.log, rid, gid)['agent_telemetry']  # the table printed above
        want = expected_summary(r.log, TrainRunId(rid).rollout(gid))  # the step's rollout, counted here
        cols = ('task_type', 'outcome', 'n', 'reached_l3', 'l1_opened')
        assert want and shown.filter(pl.col('task_type') != 'ALL').select(cols).rows() == want
    assert (res.path/'figures'/f'step_{steps[0]}_telemetry_notes.md').exists()
