"The loop benchmark notebook runs under papermill with small parameters; its JSON holds all four rules, consistent metrics and gains computed from the planted truth."
import json, re

import papermill as pm

from treetrm.core import project_root

ROOT = project_root()
NB = ROOT/'nbs'/'bench'/'loop.ipynb'
RULES = ['gate', 'gepa', 'greedy', 'fixed_n']
SMALL_SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)


def test_notebook_is_committed_clean():
    nb = json.loads(NB.read_text())
    assert nb['cells'][0]['cell_type'] == 'raw' and 'skip_exec: true' in ''.join(nb['cells'][0]['source'])
    assert sum('parameters' in c.get('metadata', {}).get('tags', []) for c in nb['cells']) == 1
    assert all(not c.get('outputs') and not c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code')
    assert not any('asyncio.run' in ''.join(c['source']) for c in nb['cells'])


def planted_accuracy(world: dict, files: dict, questions: list[dict]) -> float:
    "Expected accuracy in points, written here from world.json alone: a rule is followed when its sentence is in the default or the routed skill."
    def slug(t): return re.sub(r'[^a-z0-9]+', '-', t.lower()).strip('-')
    total = 0.0
    for q in questions:
        t, ev = q['task_type'], world['evidence'][q['question_id']]
        text = files.get('_default.md', '') + '\n' + files.get(slug(t) + '.md', '')
        have = {r['behaviour'] for r in world['task_types'][t]['rules'] if r['text'] in text}
        ok = all(have & set(c) for c in ev['requires']) and not have & set(ev['hidden_by'])
        total += 1.0 if ok else 1 / len(q['options'])
    return 100 * total / len(questions)


def test_loop_bench_notebook(tmp_path):
    out, work = tmp_path/'bench'/'loop.json', tmp_path/'work'
    pm.execute_notebook(str(NB), str(tmp_path/'loop_out.ipynb'), kernel_name='python3', cwd=str(ROOT), progress_bar=False,
                        parameters=dict(world_seeds=[1], n_videos=12, epochs=2, max_agent_calls=2500, batch_size=8, min_ladder_units=8,
                                        concurrency=4, split=SMALL_SPLIT, workdir=str(work), out=str(out)))
    s = json.loads(out.read_text())
    assert [r['rule'] for r in s['table']] == RULES and sorted(r['rule'] for r in s['runs']) == sorted(RULES)
    assert s['params']['max_agent_calls'] == 2500 and set(s['rules']) == set(RULES)
    for f in s['figures']: assert (out.parent/f).stat().st_size > 5_000
    assert {'claims_hold', 'fewer_harmful_than_every_other', 'at_least_best_gain_per_1k_calls'} <= set(s['verdict'])

    ws = next(work.glob('world1-*'))
    world = json.loads((ws/'world'/'world.json').read_text())
    questions = {q['question_id']: q for q in map(json.loads, (ws/'world'/'questions.jsonl').read_text().splitlines())}
    test = [questions[q] for q in json.loads((ws/'workspace'/'pools'/'pools.json').read_text())['pools']['test']['questions']]
    skills = lambda v: {p.name: p.read_text() for p in (ws/'workspace'/'skills'/v).glob('*.md')}
    seed = planted_accuracy(world, skills('v1'), test)
    for r in s['runs']:
        # the gain comes from the planted truth of the delivered skill files, not from a sampled test run
        assert abs(r['true_seed'] - seed) < 1e-9
        assert abs(r['true_delivered'] - planted_accuracy(world, skills(r['delivered_version']), test)) < 1e-9
        assert abs(r['true_gain'] - (r['true_delivered'] - r['true_seed'])) < 1e-9
        for k in ('trap_share', 'helpful_rejected_share'): assert r[k] is None or 0 <= r[k] <= 1
        assert r['accepted_traps'] <= r['traps_gated'] and r['helpful_rejected'] <= r['helpful_gated'] + r['accepted_helpful']
        assert r['accepted'] == r['accepted_helpful'] + r['accepted_neutral'] + r['accepted_traps']
        assert min(r['agent_calls'], r['judge_calls'], r['evolver_calls']) > 0 and r['calls'] == r['agent_calls'] + r['judge_calls'] + r['evolver_calls']
        assert r['tokens'] == r['agent_tokens'] + r['judge_tokens'] + r['evolver_tokens'] > 0
        assert abs(r['gain_per_1k_calls'] - 1000 * r['true_gain'] / r['calls']) < 1e-9
        # the budget stops the steps: a run either spent it or ran out of epochs
        assert r['budget_spent'] == (r['agent_calls'] >= 2500)
    for t in s['table']:
        runs = [r for r in s['runs'] if r['rule'] == t['rule']]
        assert t['accepted_traps'] == sum(r['accepted_traps'] for r in runs) and abs(t['true_gain'] - runs[0]['true_gain']) < 1e-9
