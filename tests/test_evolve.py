("Edit proposals, the blacklist and momentum: valid edits of the right file, bad replies recorded and never written, "
 "guidance kept on failure.")
import asyncio, json, shutil
from dataclasses import dataclass, field
from pathlib import Path
import pytest
from treetrm.core import InfraError, sha256_file
from treetrm.llm.protocol import LLMResponse
from treetrm.sim.world import load_world, make_world
from treetrm.sim.sim_agent import request_context
from treetrm.sim.roles import SimEvolver
from treetrm.agent.skills import load_skill_dir, parse_skill, sections, skill_file, split_front_matter, strategy_rules
from treetrm.agent.versions import VersionStore
from treetrm.proposers.evolve import Blacklist, propose_edit, propose_edits
from treetrm.proposers.momentum import (Pairs, GUIDANCE_FILE, classify_pairs, guidance_files, guidance_from_files,
                                    momentum_guidance)

ROOT = Path(__file__).resolve().parents[1]
SEED_SKILLS = ROOT/'prompts'/'skills'
TYPES = ['Counting Problem', 'OCR Problems', 'Attribute Perception', 'Temporal Reasoning', 'Action Recognition',
         'Object Recognition', 'Information Synopsis']

@dataclass
class Fixed:
    "A provider that replies with a given text (or raises a given exception); a unit test of reply parsing."
    reply: object
    model: str = 'fixed'
    seen: list = field(default_factory=list)
    async def chat(self, messages, **kw):
        self.seen.append(messages)
        if isinstance(self.reply, BaseException): raise self.reply
        return LLMResponse(self.reply, usage={'prompt_tokens': 1, 'completion_tokens': 1}, model=self.model)

@dataclass
class Counting:
    "Wraps a provider and records the most calls in flight at once."
    inner: object
    model: str = 'counting'
    now: int = 0
    peak: int = 0
    async def chat(self, messages, **kw):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0.01)
            return await self.inner.chat(messages, **kw)
        finally: self.now -= 1

@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('world'), seed=5, n_videos=3)

@pytest.fixture
def skills(tmp_path):
    d = tmp_path/'skills'
    shutil.copytree(SEED_SKILLS, d)
    return d

def snapshot(folder: Path) -> dict:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())}

def failure(task_type):
    return {'question_id': f'{task_type}-q1', 'question': 'What is shown?', 'options': ['A. x', 'B. y', 'C. z', 'D. w'],
            'answer': 'B', 'prediction': 'A',
            'steps': [{'tool': 'search', 'args': {'query': 'x'}, 'output': '[search] "x" top 5'}],
            'diagnosis': {'tier': 'T2', 'error_type': 'missed_evidence', 'cause': 'the scenes were not all read',
                          'missed_nodes': ['L3_1'], 'skill_adherence': 'followed',
                          'evolution_target': skill_file(task_type)}}

def propose(raw_or_provider, skills, task_type='Counting Problem', **kw):
    ev = raw_or_provider if hasattr(raw_or_provider, 'chat') else Fixed(raw_or_provider)
    return asyncio.run(propose_edit(task_type, skills_dir=skills,
                                    case_pack={'failures': [failure(task_type)], 'successes': []}, evolver=ev, **kw))

def test_sim_proposals_are_valid_edits_of_the_right_target(world, skills):
    before = snapshot(skills)
    packs = {t: {'failures': [failure(t)], 'successes': []} for t in TYPES}
    ev = Counting(SimEvolver(world, seed=2, p_helpful=0.4, p_neutral=0.3, p_trap=0.3))
    props = asyncio.run(propose_edits(TYPES, case_packs=packs, skills_dir=skills, evolver=ev, seed=1, concurrency=3))
    assert list(props) == TYPES and 1 < ev.peak <= 3
    world_rules = load_world(world)['task_types']
    for t, p in props.items():
        assert p.status == 'ok', (t, p.status, p.message)
        assert p.target == p.edit.target == skill_file(t) and p.files == {skill_file(t): p.new_text}
        old = (skills/p.target).read_text()
        new = parse_skill(p.new_text, file=p.target)
        assert split_front_matter(p.new_text)[0] == split_front_matter(old)[0]
        assert [s for s in new.sections if s.heading != 'Strategy'] == [s for s in parse_skill(old).sections
                                                                        if s.heading != 'Strategy']
        added = strategy_rules(new)[-1]
        assert added in {r['text'] for r in world_rules[t]['rules']} and added not in old
    assert snapshot(skills) == before  # proposing writes nothing

def test_blacklist_is_shown_and_honoured(world, skills):
    sim = SimEvolver(world, seed=0)
    first = propose(sim, skills, seed=0)
    assert first.status == 'ok'
    bl = Blacklist().add('Counting Problem', first.edit, 'reject_futility')
    again = propose(sim, skills, seed=0, blacklist=bl)  # the sim avoids rules it sees in the blacklist
    assert again.status == 'ok' and again.fingerprint != first.fingerprint
    stubborn = propose(Fixed(first.raw), skills, blacklist=bl)
    assert (stubborn.status, stubborn.reason, stubborn.new_text) == ('blacklisted', 'blacklisted', None)
    # the same edit with a new rationale is still the same edit
    reworded = json.loads(first.raw) | {'rationale': 'a different reason'}
    assert propose(json.dumps(reworded), skills, blacklist=bl).status == 'blacklisted'
    # another type's blacklist does not apply, and clearing lifts it
    assert propose(first.raw, skills, blacklist=bl.clear('Counting Problem')).status == 'ok'
    assert propose(first.raw, skills, blacklist=Blacklist().add('OCR Problems', first.edit, 'x')).status == 'ok'

def test_blacklist_round_trips_through_checkpoint_json(world, skills):
    p = propose(SimEvolver(world, seed=0), skills, seed=0)
    bl = Blacklist().add('Counting Problem', p.edit, 'reject_futility').add('OCR Problems', p.edit, 'probation_revert')
    back = Blacklist.from_dict(json.loads(json.dumps(bl.to_dict())))
    assert back == bl and ('Counting Problem', p.fingerprint) in back
    assert back.texts('Counting Problem')[0].endswith('(rejected: reject_futility)')

def op(text): return [{'op': 'append_to_section', 'section': 'Strategy', 'text': text}]
GOOD = {'target': 'counting-problem.md', 'ops': op('- Open every keyframe of each event the search returns.'),
        'rationale': 'r'}
MALFORMED = [
    ('prose', 'The agent should search more carefully next time.', 'not_json'),
    ('empty', '', 'not_json'),
    ('json-list', '[1, 2, 3]', 'not_json'),
    ('cut-off', json.dumps(GOOD)[:70], 'truncated'),
    ('no-ops-key', json.dumps({'target': 'counting-problem.md', 'rationale': 'r'}), 'schema'),
    ('unknown-op', json.dumps({'target': 'counting-problem.md', 'ops': [{'op': 'rewrite_file', 'text': 'x'}]}),
     'schema'),
    ('op-missing-text', json.dumps({'target': 'counting-problem.md',
                                    'ops': [{'op': 'append_to_section', 'section': 'Strategy'}]}), 'schema'),
    ('parent-dir', json.dumps({**GOOD, 'target': '../x.md'}), 'bad_target'),
    ('parent-dir-real-file', json.dumps({**GOOD, 'target': '../skills/counting-problem.md'}), 'bad_target'),
    ('absolute', json.dumps({**GOOD, 'target': '/etc/counting-problem.md'}), 'bad_target'),
    ('missing-file', json.dumps({**GOOD, 'target': 'counting-problems.md'}), 'bad_target'),
    ('other-types-file', json.dumps({**GOOD, 'target': 'ocr-problems.md'}), 'bad_target'),
    ('oversized', json.dumps({**GOOD, 'ops': op('- ' + 'check again ' * 2000)}), 'too_large'),
    ('doubles-the-file', json.dumps({**GOOD, 'ops': op('- ' + 'check again ' * 150)}), 'length_ratio'),
    ('frozen', json.dumps({**GOOD, 'ops': [{'op': 'replace_section', 'section': 'Answering', 'text': 'Guess.'}]}),
     'frozen_section'),
    ('new-heading', json.dumps({**GOOD, 'ops': op('## Extra\n- x')}), 'heading_in_text'),
    ('unknown-section', json.dumps({**GOOD, 'ops': [{'op': 'append_to_section', 'section': 'Tactics', 'text': '- x'}]}),
     'unknown_section'),
    ('front-matter',
     json.dumps({**GOOD, 'ops': [{'op': 'search_replace', 'search': 'task_type: Counting Problem',
                                  'replace': 'task_type: OCR Problems'}]}), 'front_matter_changed'),
]

@pytest.mark.parametrize('name,raw,reason', MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_replies_are_invalid_and_write_nothing(skills, name, raw, reason):
    before = snapshot(skills)
    p = propose(raw, skills)
    assert (p.status, p.reason) == ('invalid', reason), p.message
    assert p.new_text is None and p.files == {} and p.message and p.raw == raw
    assert snapshot(skills) == before

def test_good_no_change_and_infra_replies(skills):
    assert propose(json.dumps(GOOD), skills).status == 'ok'
    assert propose(json.dumps({**GOOD, 'ops': []}), skills).status == 'no_change'
    same = {**GOOD, 'ops': [{'op': 'search_replace', 'search': 'a synonym', 'replace': 'a synonym'}]}
    assert ((propose(json.dumps(same), skills).status, propose(json.dumps(same), skills).reason)
            == ('no_change', 'no_change'))
    err = propose(Fixed(InfraError('evolver endpoint down [role=evolver]')), skills)
    assert (err.status, err.reason) == ('error', 'infra') and 'role=evolver' in err.message

def test_request_carries_the_contract_context(skills):
    ev = Fixed(json.dumps(GOOD))
    seen = ev.seen
    bl = Blacklist().add('Counting Problem', propose(json.dumps(GOOD), skills).edit, 'reject_inertia')
    propose(ev, skills, blacklist=bl, guidance='- Prefer keyframe rules.')
    ctx = request_context(seen[0])
    assert set(ctx) == {'kind', 'task_type', 'target', 'skill_text', 'failures', 'successes', 'blacklist'}
    assert (ctx['kind'], ctx['task_type'], ctx['target']) == ('evolve', 'Counting Problem', 'counting-problem.md')
    assert ctx['skill_text'] == (skills/'counting-problem.md').read_text()
    assert ctx['failures'][0]['diagnosis']['error_type'] == 'missed_evidence' and ctx['successes'] == []
    assert 'Open every keyframe of each event the search returns.' in ctx['blacklist'][0]
    assert '- Prefer keyframe rules.' in seen[0][-1]['content']

def test_classify_pairs():
    prev = {'q1': True, 'q2': True, 'q3': False, 'q4': False}
    curr = {'q1': True, 'q2': False, 'q3': True, 'q4': False}
    assert classify_pairs(prev, curr) == Pairs(REGRESSED=('q2',), STILL_FAILING=('q4',), IMPROVED=('q3',),
                                               STABLE=('q1',))
    with pytest.raises(Exception, match='q5'): classify_pairs(prev, curr | {'q5': True})

PAIRS = classify_pairs({'q1': True, 'q2': False}, {'q1': False, 'q2': True})

@pytest.mark.parametrize('reply,reason', [('Sorry, I cannot do that.', 'not_json'), ('{"guidance": ""}', 'empty'),
                                          ('{"text": "- x"}', 'schema'), ('{"guidance": "- Keep', 'truncated'),
                                          (InfraError('down'), 'infra')])
def test_momentum_keeps_previous_guidance_on_failure(reply, reason):
    res = asyncio.run(momentum_guidance(PAIRS, previous_guidance='- previous', evolver=Fixed(reply)))
    assert (res.guidance, res.updated, res.reason) == ('- previous', False, reason)

def test_momentum_new_guidance_stored_as_prompts_version(tmp_path):
    res = asyncio.run(momentum_guidance(PAIRS, previous_guidance='- previous',
                                        evolver=Fixed('{"guidance": "- Keep keyframe rules."}')))
    assert (res.guidance, res.updated, res.reason) == ('- Keep keyframe rules.', True, None)
    store = VersionStore(tmp_path, 'prompts')
    v1 = store.import_dir(ROOT/'prompts'/'agent')
    v2 = store.create(guidance_files(res.guidance), parent=v1, source='momentum')
    assert guidance_from_files(store.read_files(v2)) == '- Keep keyframe rules.'
    assert store.read_files(v1) == {k: v for k, v in store.read_files(v2).items() if k != GUIDANCE_FILE}
