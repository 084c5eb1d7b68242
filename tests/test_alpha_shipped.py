"""α through the shipped path: on null worlds the real training loop, at its default acceptance, keeps at most α of
the edits it judges (the "valid under repeated fresh draws" guarantee, through `Runner.train` instead of a copy)."""
# Every candidate rule of a null world has a true effect of exactly 0 on every question (effect mixture (1, 0, 0),
# no side effects: each rule's calibrated strength is 0), so every edit the evolver proposes is a null edit and
# any edit the loop keeps is a false accept. `Runner.train` runs twice per world: with TrainConfig's defaults for
# everything that decides an edit (acceptance 'gate', alpha spent on the e-process and the ladder end's exact look,
# calibrated evidence caps, futility, base arms reused and inherited, R only where read, deliver 'best'), and with the
# seed's probation instead (provisional accepts settled on fresh draws over probation_rounds, a fresh R each epoch,
# open probations reverted): the path where repeated draws could inflate alpha. TRAIN only sets how long a run is and
# which task types are gated. The sim roles are the loop benchmark's: the one-call agent, judge, evolver.
#
# What is counted. A *judged edit* is an edit the gate decided (a decision-log entry of kind 'gate'). It is *kept*
# when the e-process confirmed it (gate `accept_confirmed`, or probation `confirm`) or when the delivered skills
# hold it (what the user gets; under deliver='best' that can differ from what was confirmed, so both count). The
# guarantee (nbs/gate/00_evalues.ipynb, docs/design.md §7): a null edit is confirmed with probability at most alpha
# over the gate's pass and every fresh probation round, so the share kept is at most alpha.
#
# The tolerance: 3 standard errors of a share of alpha on the judged edits (n_min(alpha) of them measure it within ±2
# points), or 3 of the measured share's SE clustered by run (edits of one run share a world and base arms) if larger.
# When written (probation): 892 judged edits, 13 kept (1.46%; SE 0.40 pt, 0.37 pt clustered; bound 7.19%), of which 7
# confirmed and 6 delivered unconfirmed: the best pointer had moved to a version holding provisional edits (fixed: it
# never moves while an edit is on probation; `test_every_delivered_edit_was_confirmed` failed before the fix). Shown to
# fail with `treetrm.gate.evalues.confirm_log_threshold` returning log 1 (the gate and probation confirming at E+ >= 1,
# not the calibrated ~12): 147 of 1186 kept, 12.4% > 10.1%. The check is coarse: at E+ >= 4 the loop keeps 2.6%, at E+
# >= 2 6.0% (inside the bound), because futility rejects 95% of null edits near min_n; confirming every probation that
# is not harmful keeps 3.5%.
import asyncio, concurrent.futures as cf, math, multiprocessing as mp, time
from collections import Counter
from pathlib import Path

import pytest

from treetrm.train.settings import train_config
from treetrm.executors import worker_environment
from treetrm.bench.loop_bench import DEFAULT_GRID_SPLIT, delivered_rules
from treetrm.sim.realism import NOISE_LEGACY
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world, load_world, world_questions, question_probability
from treetrm.sim.sim_agent import SimAgent
from treetrm.sim.roles import SimJudge, SimEvolver

pytestmark = [pytest.mark.slow]  # the tiers: conftest.py

NULL = dict(effects=((1.0, 0.0, 0.0),), side_effect_share=0.0,  # every rule's effect 0 everywhere (strength 0)
            **NOISE_LEGACY)  # the worlds of the measured rates (CHANGELOG; others: test_sim_noise_model)
TYPES = ('Counting Problem', 'OCR Problems', 'Attribute Perception', 'Temporal Reasoning', 'Action Recognition',
         'Object Recognition')
WORLD = dict(profile='realistic', n_videos=60, questions_per_video={t: 2 for t in TYPES}, realism=NULL)
SPLIT = dict(DEFAULT_GRID_SPLIT, test_ratio=0.1, val_ratio=0.37)  # 40 validation units a type, 408 diagnosis questions
TRAIN = dict(epochs=7, patience=7, min_ladder_units=20)  # run length (patience never binds) and the gated types only
SEEDS = range(6)  # world seeds, one training run each (two at a time): about 150 judged edits a run
PRECISION = 0.02  # half-width of the 95% interval the judged edits must give a rate of alpha (0.10: 865 edits)
CONFIRMS = {('gate', 'accept_confirmed'), ('probation', 'confirm')}
CONFIGS = {'defaults': {},  # the shipped defaults, and the seed's probation (at its alpha, 0.05)
           'probation': dict(gate=dict(alpha=0.05, alpha_final=0.0, alpha_prov=0.2), validation_pass='fresh')}


def alpha_of(config: str) -> float:
    "The per-edit level of a configuration."
    return train_config(TRAIN | CONFIGS[config]).gate.alpha


def n_min(alpha: float) -> int:
    "Judged edits that measure a rate of `alpha` within ±PRECISION (95%)."
    return math.ceil(1.96**2 * alpha * (1 - alpha) / PRECISION**2)


def edit_rule(world: dict, d: dict) -> str:
    "The id of the one world rule a decision-log entry's edit adds."
    rules = [r['id'] for r in world['task_types'][d['task_type']]['rules'] if any(r['text'] in x for x in d['texts'])]
    assert len(rules) == 1, f'entry {d} adds {len(rules)} world rules; the sim evolver adds exactly one'
    return rules[0]


def judged_edits(world: dict, decisions, delivered: dict) -> list[dict]:
    "One row per gate judgement: its rule, the decision, confirmed by the e-process, held by the delivered skills."
    rows, last_accept = [], {}  # a confirm clears the type's blacklist, so a rule can be judged again on a new base
    for d in decisions:
        if d['kind'] == 'gate':
            rows.append(dict(rule=edit_rule(world, d), decision=d['decision'], delivered=False,
                             confirmed=d['decision'] in ('accept_confirmed', 'skipped_conflict')))  # conflict: bound
            if d['decision'].startswith('accept'): last_accept[rows[-1]['rule']] = rows[-1]
        elif (d['kind'], d['decision']) in CONFIRMS:  # a probation confirms the edit its gate accepted provisionally
            last_accept[edit_rule(world, d)]['confirmed'] = True
    for _, r in delivered_rules(world, delivered):  # the delivered text is there because its last accept applied it
        assert r['id'] in last_accept, f"the delivered skills hold {r['id']}, which no gate accepted"
        last_accept[r['id']]['delivered'] = True
    return [r | dict(kept=r['confirmed'] or r['delivered']) for r in rows]


async def _null_run(seed: int, d: Path, config: str) -> dict:
    "Make the null world of `seed` in `d`, train on it with CONFIGS[config], return its decision log and delivery."
    world = make_world(d/'world', seed=seed, **WORLD)
    roles = dict(agent=SimAgent(world, 0, one_call=True), judge=SimJudge(world, 0), evolver=SimEvolver(world, 0))
    runner = Runner(d/'workspace', data_dir=world, config=TRAIN | CONFIGS[config], split_config=SPLIT, seed=0,
                    concurrency=1,
                    providers=roles, progress=False)
    t0 = time.perf_counter()
    res = await runner.train('null')
    runner.log.close()
    return dict(seed=seed, world=str(world), decisions=list(res.state.decisions),
                delivered=runner.skills.read_files(res.state.skills_current), wall_s=round(time.perf_counter() - t0, 1))


def null_run(seed: int, workdir: str, config: str = 'defaults') -> dict:
    "One training run on the null world of `seed` (in a worker process: it owns its event loop)."
    return asyncio.run(_null_run(seed, Path(workdir), config))


def run_edits(run: dict) -> list[dict]:
    "The judged edits of one `null_run`."
    return judged_edits(load_world(run['world']), run['decisions'], run['delivered'])


def kept_share(runs: list[dict], alpha: float) -> dict:
    "Judged and kept edits over the runs, the kept share, its binomial SE at alpha and its SE clustered by run."
    edits = [run_edits(r) for r in runs]
    n, k = sum(map(len, edits)), sum(e['kept'] for es in edits for e in es)
    rate = k / n
    per_run = [(sum(e['kept'] for e in es), len(es)) for es in edits]
    clustered = math.sqrt(len(runs) / (len(runs) - 1) * sum((kr - rate * nr)**2 for kr, nr in per_run)) / n
    count = lambda key: sum(e[key] for es in edits for e in es)
    return dict(judged=n, kept=k, rate=rate, se_alpha=math.sqrt(alpha * (1 - alpha) / n), se_clustered=clustered,
                se_observed=math.sqrt(rate * (1 - rate) / n), confirmed=count('confirmed'),
                delivered=count('delivered'),
                delivered_unconfirmed=sum(e['delivered'] and not e['confirmed'] for es in edits for e in es),
                decisions=dict(Counter(f"{d['kind']}:{d['decision']}" for r in runs for d in r['decisions']
                                       if d['kind'] in ('gate', 'probation'))))


def run_null_worlds(workdir: Path, seeds=SEEDS, processes: int = 2, initializer=None,
                    config: str = 'defaults') -> list[dict]:
    "`null_run` for every seed in worker processes (`initializer` runs first in each: the broken-variant checks)."
    with worker_environment(), cf.ProcessPoolExecutor(processes, mp_context=mp.get_context('spawn'),
                                                       initializer=initializer) as pool:
        return list(pool.map(null_run, seeds, [str(workdir/f'w{s}') for s in seeds], [config] * len(seeds)))


@pytest.fixture(scope='module', params=list(CONFIGS))
def null_runs(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f'alpha-{request.param}')
    t0 = time.perf_counter()
    runs = run_null_worlds(work, config=request.param)
    print(f'\n{request.param}: {len(runs)} null-world training runs in {time.perf_counter() - t0:.0f} s: '
          f'{kept_share(runs, alpha_of(request.param))}')
    return work, runs, alpha_of(request.param)


def test_null_world_plants_no_effect(null_runs):
    "The premise: every rule of a null world leaves every question's chance of a right answer where it was."
    work, _, _ = null_runs
    world_dir = work/'w0'/'world'
    world = load_world(world_dir)
    assert all(r['effect'] == 0 and r['strength'] == 0 for t in TYPES for r in world['task_types'][t]['rules'])
    for q in world_questions(world_dir).values():
        rules = '\n'.join(r['text'] for r in world['task_types'][q.task_type]['rules'])
        assert question_probability(world, q.question_id, rules, len(q.options)) == \
            question_probability(world, q.question_id, '', len(q.options))


def test_the_shipped_loop_keeps_at_most_alpha_of_null_edits(null_runs):
    "The share of judged null edits kept is measured within ±2 points and is at most alpha + 3 SE."
    _, runs, alpha = null_runs
    s = kept_share(runs, alpha)
    assert s['judged'] >= n_min(alpha), \
        f"{s['judged']} judged edits measure a share of alpha to ±{196*s['se_alpha']:.2f} pt"
    se = max(s['se_alpha'], s['se_clustered'])  # 3 SE of a share at alpha; the runs' clustering where it is larger
    assert s['rate'] <= alpha + 3 * se, f"kept {s['kept']} of {s['judged']} null edits: {s}"
    assert 1.96 * max(s['se_clustered'], s['se_observed']) <= PRECISION, s  # the measured rate too, clustered by run
    settled = s['decisions'].get('probation:confirm', 0) + s['decisions'].get('probation:revert', 0)
    provisional = s['decisions'].get('gate:accept_provisional', 0)
    assert provisional == 0 or settled >= 20, \
        f'only {settled} probations settled: the repeated fresh draws were hardly exercised ({s})'


def test_every_delivered_edit_was_confirmed(null_runs):
    "What the user gets holds only edits the e-process confirmed (docs/design.md §8: an unconfirmed edit is reverted)."
    _, runs, _ = null_runs
    unconfirmed = [(r['seed'], e['rule']) for r in runs for e in run_edits(r) if e['delivered'] and not e['confirmed']]
    assert not unconfirmed, f'delivered but never confirmed (world seed, rule): {unconfirmed}'
