"""The regime map's worlds (issue 47): a greedy-decoding (temperature 0) regime, rule effects that vary by video, a
Video-MME-shaped world dealt 3 questions a video, the `large` effect mixture, and a source for every world setting.

Each expected number has its own reason: the greedy draws are checked against the exact probabilities of the model
they implement (not against the code's own output), with a tolerance of 3 standard errors of the simulation."""
import dataclasses, math, random
import pytest
from treetrm.core import ConfigError
from treetrm.sim.world import make_world, load_world, check_world, world_questions
from treetrm.sim.realism import (GREEDY_NOISE, RealismParams, SOURCES, EFFECT_MIXTURES, p_right, rule_effects,
                                 rule_idio, flip_rate, greedy_fresh)
from treetrm.sim.sim_agent import realistic_draw
from treetrm.bench.grid import videomme_type_counts, regime_world, cell_budget

TWO_TYPES = {'Counting Problem': 2, 'OCR Problems': 2}


@pytest.fixture(scope='module')
def greedy_world(tmp_path_factory):
    "A greedy world of 1,000 questions at the measured temperature-0 noise."
    d = make_world(tmp_path_factory.mktemp('greedy'), seed=11, n_videos=250, questions_per_video=TWO_TYPES,
                   profile='realistic', realism=GREEDY_NOISE)
    return d, load_world(d), world_questions(d)


def _text(world, tt, rules=()): return '\n'.join(r['text'] for r in rules)  # a skill text holding these rules


def test_greedy_runs_of_one_text_flip_at_the_measured_rate(greedy_world):
    "Two seeds of the same text disagree on `seed_flips` of the answers (2.5%), as `greedy_fresh` calibrates them."
    _, world, qs = greedy_world
    pairs = [(realistic_draw(world, q, '', a)['right'], realistic_draw(world, q, '', b)['right'])
             for q in qs.values() for a, b in ((1, 2), (3, 4), (5, 6), (7, 8))]
    got, want = sum(x != y for x, y in pairs) / len(pairs), GREEDY_NOISE['seed_flips']
    se = math.sqrt(want * (1 - want) / len(pairs))  # pairs of one question are not independent: 4 of 1,000 each
    assert abs(got - want) <= 3 * se * 2, (got, want, se)  # ×2: a design effect of at most 4 draws a question


def test_a_rule_changes_greedy_answers_as_its_probabilities_cross_the_questions_own_draw(greedy_world):
    """A text with one rule against the seed text, one request each at one seed: discordant with the exact chance
    (1-s)²|p1-p2| + (1-(1-s)²)(p1(1-p2) + p2(1-p1)) — comonotone unless a request draws anew (chance s)."""
    _, world, qs = greedy_world
    s = world['realism']['calibration']['fresh']
    tt = 'Counting Problem'
    rule = next(r for r in world['task_types'][tt]['rules'] if abs(r['effect']) < 0.5)  # a null rule: text only
    text = rule['text']
    mine = [q for q in qs.values() if q.task_type == tt]
    exact, hits = 0.0, 0
    for q in mine:
        ev = world['evidence'][q.question_id]
        p1 = p_right(world['models'][q.question_id], [])
        p2 = p_right(world['models'][q.question_id], rule_effects([rule], q.question_id, ev['class'], world['seed'],
                                                                  q.video_id))
        exact += (1 - s) ** 2 * abs(p1 - p2) + (1 - (1 - s) ** 2) * (p1 * (1 - p2) + p2 * (1 - p1))
        for seed in range(4):
            hits += realistic_draw(world, q, '', seed)['right'] != realistic_draw(world, q, text, seed)['right']
    n = 4 * len(mine)
    want, got = exact / len(mine), hits / n
    assert abs(got - want) <= 3 * 2 * math.sqrt(want * (1 - want) / n), (got, want)
    assert want < 0.12  # far below the sampled worlds' 15-30%: the regime differs


def test_greedy_worlds_keep_the_answers_of_sampled_ones_in_expectation(greedy_world):
    "The decoding changes which draws coincide, not P(right): the seed skills' accuracy is the asked 0.55."
    _, world, qs = greedy_world
    acc = sum(p_right(m, []) for m in world['models'].values()) / len(world['models'])
    assert abs(acc - RealismParams().seed_accuracy) < 1e-3


def test_greedy_fresh_inverts_the_flip_rate():
    "1 - (1 - s)² of the pairs hold a fresh draw, which disagrees with chance 2p(1-p): flips = that × F."
    import numpy as np
    p = np.array([0.1, 0.5, 0.9, 0.7])
    s = greedy_fresh(p, 0.05)
    assert math.isclose((1 - (1 - s) ** 2) * flip_rate(p), 0.05)


def test_video_effects_are_shared_by_a_videos_questions(tmp_path):
    "With video idiosyncrasy only, a rule's extra effect is the same on every question of a video, not across videos."
    d = make_world(tmp_path/'w', seed=2, n_videos=20, questions_per_video=TWO_TYPES, profile='realistic',
                   realism=dict(video_idiosyncrasy=0.2))
    world = load_world(d)
    rule = world['task_types']['OCR Problems']['rules'][0]
    by_video = {}
    for q, ev in world['evidence'].items():
        by_video.setdefault(ev['video_id'], set()).add(round(rule_idio(world['seed'], q, ev['video_id'], rule), 12))
    assert all(len(v) == 1 for v in by_video.values())
    assert len({next(iter(v)) for v in by_video.values()}) == len(by_video)
    with pytest.raises(ValueError, match='varies by video'):
        rule_idio(world['seed'], next(iter(world['evidence'])), None, rule)
    assert len(check_world(d)) == 0  # effects recompute exactly with the video terms


def test_videomme_world_is_dealt_three_questions_a_video_at_the_benchmarks_shares(tmp_path):
    counts = videomme_type_counts()
    assert sum(counts.values()) == 900 and len(counts) == 12
    assert counts['Object Reasoning'] > 8 * counts['Spatial Perception']  # very unequal, as in the benchmark
    w = regime_world('large', 'greedy', 'videomme')
    d = make_world(tmp_path/'v', seed=3, **w)
    world, qs = load_world(d), world_questions(d)
    per_video = {}
    for q in qs.values(): per_video[q.video_id] = per_video.get(q.video_id, 0) + 1
    assert set(per_video.values()) == {3} and len(per_video) == 300
    assert {t: v['n_questions'] for t, v in world['task_types'].items()} == counts
    assert len(check_world(d)) == 0
    assert cell_budget(w) == 10 * 540  # 900 questions, 20% test, 75% of the rest validate


@pytest.mark.parametrize('kwargs, match', [
    (dict(n_videos=10, type_counts={'OCR Problems': 31}), 'hold 31 questions but 10 videos hold 30'),
    (dict(n_videos=10, type_counts={'OCR Problems': 30}, questions_per_video=TWO_TYPES), 'not both'),
    (dict(n_videos=10, type_counts={'OCR Problems': 29, 'Nope': 1}), 'no planter'),
    (dict(n_videos=2, questions_per_video={'Object Reasoning': 1}, profile='easy'), 'only the realistic profile'),
    (dict(n_videos=2, realism=dict(decoding='beam')), 'decoding must be one of'),
    (dict(n_videos=2, realism=dict(decoding='greedy', seed_flips=0.3)), 'seed_flips must lie in'),
])
def test_bad_world_settings_are_named_before_anything_is_written(tmp_path, kwargs, match):
    kwargs = dict(profile='realistic') | kwargs
    with pytest.raises(ConfigError, match=match): make_world(tmp_path/'x', **kwargs)
    assert not (tmp_path/'x').exists()


def test_every_world_setting_cites_its_source():
    "Issue 47: a measurement, a paper, or 'assumption' — for every field of RealismParams."
    fields = {f.name for f in dataclasses.fields(RealismParams)}
    assert set(SOURCES) == fields
    assert all(s.startswith(('measured', 'paper', 'assumption', 'anchored')) for s in SOURCES.values()), SOURCES


def test_the_large_mixture_holds_edits_of_five_to_fifteen_points(tmp_path):
    assert any(lo >= 5 and hi <= 15 for _, lo, hi in EFFECT_MIXTURES['large'])
    world = load_world(make_world(tmp_path/'l', seed=4, n_videos=50, questions_per_video=TWO_TYPES,
                                  profile='realistic', realism=dict(effects='large')))
    effects = [r['effect'] for t in world['task_types'].values() for r in t['rules']]
    assert sum(e >= 5 for e in effects) >= 2  # 5% of 40 rules a type: 2 a type, where the type can reach them
