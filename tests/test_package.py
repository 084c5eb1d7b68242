("The package as a user gets it: a wheel that trains the demo from an empty folder, questions read as they are, "
 "one validated config.")
import asyncio, json, os, site, subprocess, sys, sysconfig
from pathlib import Path

import polars as pl
import pytest
import yaml

from treetrm.core import ConfigError, project_root
from treetrm.train.settings import load_config
from treetrm.data import load_questions, question_record
from treetrm.train.runner import Runner
from treetrm.sim.world import make_world

ROOT = project_root()
SPLIT = dict(seed=0, test_ratio=0.25, epsilon=0.3, report_floor=10, floor_k={}, val_ratio=0.6, val_wrong_min=2)
SMALL = dict(split=SPLIT,
             train=dict(epochs=1, min_ladder_units=8, batch=dict(batch_size=8, min_class=2, correct_ratio=0.2)))

TINY_TRAINING = r'''
import asyncio, json, os, sys
import treetrm
from treetrm.core import asset_dir
from treetrm.train.runner import Runner
r = Runner('ws', backend='sim', concurrency=8, progress=False,
           config={'split': {'val_wrong_min': 2}, 'train': {'epochs': 1, 'max_calls': 150, 'min_ladder_units': 10}})
res = asyncio.run(r.train('tiny'))
print(json.dumps(dict(package=treetrm.__file__, prompts=str(asset_dir('prompts')), demo=str(r.data_dir),
                      files=sorted(os.listdir('.')), test=res.metrics['test']['delivered_accuracy'],
                      decisions=len(res.state.decisions))))
'''


def _wheel(tmp_path) -> Path:
    out = tmp_path/'dist'
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '--no-build-isolation', str(ROOT), '-w',
                    str(out)], check=True, cwd=tmp_path)
    return next(out.glob('treetrm-*.whl'))


@pytest.mark.slow
def test_wheel_trains_the_demo_from_an_empty_folder(tmp_path):
    ("A fresh venv with only the built wheel (its dependencies borrowed from this venv, not its code) "
     "trains from an empty folder.")
    wheel, venv = _wheel(tmp_path), tmp_path/'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    py = venv/'bin'/'python'
    fresh_site = Path(subprocess.run([py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                     check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--target', str(fresh_site), str(wheel)],
                   check=True)
    # the dependencies: this venv's site-packages as a plain path
    # (its .pth files, the editable checkout among them, are not read)
    (fresh_site/'deps.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
    empty = tmp_path/'anywhere'
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ('TREETRM_ROOT', 'PYTHONPATH')}
    got = subprocess.run([py, '-c', TINY_TRAINING], cwd=empty, env=env, capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    info = json.loads(got.stdout.strip().splitlines()[-1])
    # the wheel's code, not the checkout's
    assert info['package'].startswith(str(fresh_site)) and not info['package'].startswith(str(ROOT))
    # prompts and demo world from the package
    assert info['prompts'].startswith(str(fresh_site)) and info['demo'].startswith(str(fresh_site))
    assert info['files'] == ['ws'] and info['decisions'] > 0 and 0 < info['test'] <= 1


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp('pkg')/'world', seed=1, n_videos=12)


def _as_hf_parquet(world:Path, out:Path) -> Path:
    ("The world's questions written as Hugging Face Video-MME does: its columns, `videoID` the tree key, "
     "`video_id` a number.")
    rows = []
    numbers = {v: f'{i:03d}'
               for i, v in enumerate(dict.fromkeys(q.video_id for q in load_questions(world/'questions.jsonl')), 1)}
    for q in load_questions(world/'questions.jsonl'):
        r = question_record(q)
        rows.append(dict(video_id=numbers[q.video_id], duration=r.get('duration', 'short'), domain=r.get('domain', ''),
                         sub_category='', url=f'https://www.youtube.com/watch?v={q.video_id}', videoID=q.video_id,
                         question_id=q.question_id, task_type=q.task_type, question=q.question, options=list(q.options),
                         answer=q.answer))
    pl.DataFrame(rows).write_parquet(out)
    return out


def test_hf_parquet_trains_without_conversion(tmp_path, world):
    parquet = _as_hf_parquet(world, tmp_path/'videomme.parquet')
    r = Runner(tmp_path/'ws', questions=parquet, trees_dir=world/'trees', config=SMALL, concurrency=4, progress=False)
    assert r.data_dir == world  # the sim roles find the world beside its trees
    res = asyncio.run(r.train('hf'))
    test = r.pool('test')
    assert r.log.predictions(f'{res.internal_run_id}_final_test').height == len(test)
    # every question was found and answered
    assert r.log.predictions('baseline')['stop_reason'].is_in(['parse_error', 'error']).sum() == 0
    assert {q.question_id for q in r.questions} == {q.question_id for q in load_questions(world/'questions.jsonl')}


BAD = [  # (dotted key, bad value): each must be refused, naming the key
    ('train.epochs', 0), ('train.epochs', 'two'), ('train.epochs', 1.5), ('train.epochs', True), ('train.patience', 0),
    ('train.cooldown_steps', -1), ('train.probation_rounds', 0), ('train.gamma', 3), ('train.gamma', -0.1),
    ('train.p_low', 2), ('train.p_high', 'high'), ('train.min_ladder_units', 0), ('train.probation_share', 5),
    ('train.probation_share', 1.0), ('train.ladder_cap', 0), ('train.max_steps', 0), ('train.infra_guard', 1.5),
    ('train.gate_guard_err', 2.0), ('train.gate_guard_err', -0.5), ('train.momentum', 'yes'), ('train.prompt_edit', 1),
    ('train.max_calls', 0), ('train.max_agent_calls', -5), ('train.deliver', 'last'), ('train.acceptance', 'vote'),
    ('train.gate.alpha', 0), ('train.gate.alpha', 1.5), ('train.gate.alpha_dir', -1), ('train.gate.alpha_prov', 2),
    ('train.gate.min_n', -1), ('train.gate.prior_a', 0), ('train.gate.tau', -1), ('train.gate.min_effect_q', 0.4),
    ('train.gate.beta_fut', 1), ('train.batch.batch_size', 0), ('train.batch.correct_ratio', 1.0),
    ('train.batch.min_class', 99), ('train.gate.alfa', 0.1), ('train.epoch', 2), ('split.test_ratio', 1.5),
    ('split.val_ratio', 0), ('split.epsilon', 0), ('split.report_floor', -1), ('split.floor_k', {'OCR Problems': -1}),
    ('split.n_test', 3), ('skill_mode', 'always')]
RELATIONS = [({'train.p_low': 0.6, 'train.p_high': 0.5}, 'p_low'),
             ({'train.ladder_cap': 5, 'train.gate.min_n': 20}, 'ladder_cap')]


def _snapshot(folder:Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*')) if p.is_file()}


def test_bad_config_values_are_refused_before_anything_is_written(tmp_path, world):
    ws = tmp_path/'ws'
    Runner(ws, data_dir=world, config=SMALL, progress=False).log.close()
    before = _snapshot(ws)
    assert len(BAD) >= 30
    for key, value in BAD:
        with pytest.raises(ConfigError) as e:
            Runner(ws, data_dir=world, config=load_config(SMALL, {key: value}), progress=False)
        assert key.split('.')[-1] in str(e.value), (key, value, str(e.value))
    for overrides, key in RELATIONS:
        with pytest.raises(ConfigError, match=key): load_config(SMALL, overrides)
    f = tmp_path/'bad.yaml'
    f.write_text(yaml.safe_dump({'train': {'gamma': 3}}))
    with pytest.raises(ConfigError, match=r'gamma.*bad\.yaml'): Runner(ws, data_dir=world, config=f, progress=False)
    assert _snapshot(ws) == before  # byte-identical: nothing was written


def test_resume_with_another_config_names_the_differences(tmp_path, world):
    cfg = load_config(SMALL)
    r = Runner(tmp_path/'ws', data_dir=world, config=cfg, concurrency=4, progress=False)
    first = asyncio.run(r.train('c1'))
    r.log.close()
    changed = Runner(tmp_path/'ws', data_dir=world,
                     config=load_config(cfg, {'train.gate.alpha': 0.05, 'skill_mode': 'manual'}), concurrency=4,
                     progress=False)
    with pytest.raises(ConfigError) as e: asyncio.run(changed.train('c1'))
    assert 'gate.alpha' in str(e.value) and 'skill_mode' in str(e.value) and 'fresh=True' in str(e.value)
    again = asyncio.run(changed.train('c1', fresh=True))  # fresh=True archives the old run and starts again
    assert (first.internal_run_id, again.internal_run_id) == ('c1', 'c1~2')
    assert (tmp_path/'ws'/'runs'/'c1.archived-1').is_dir()
    test = again.metrics['test']
    assert test['delivered_run'] == 'c1~2_final_test' and test['n'] == len(changed.pool('test'))
    # the delivered accuracy is the share of the test pool that the new attempt's final test got right
    final = changed.log.predictions(test['delivered_run'], [q.question_id for q in changed.pool('test')])
    assert final.height == test['n'] and test['delivered_accuracy'] == final['correct'].sum() / test['n']
