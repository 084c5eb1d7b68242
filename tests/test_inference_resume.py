"""run_inference survives SIGKILL: a rerun with the same run_id finishes the run, and no completed question is
recomputed.

The file is also the child process: `python test_inference_resume.py WORLD DB CALLS RUN_ID PHASE` runs inference over
a small simulated world with `ViewThenAnswer`, a deterministic provider that appends one line per model call to CALLS.
"""
import asyncio, hashlib, json, os, signal, sqlite3, subprocess, sys, time
from pathlib import Path

N_VIDEOS, CONCURRENCY, DELAY_S = 2, 2, 0.08

def question_key(first_user_message:str) -> str:
    "A short id of a question's conversation: the hash of its first user message (question, options, video)."
    return hashlib.sha256(first_user_message.encode()).hexdigest()[:16]

class ViewThenAnswer:
    "Opens the first L1 scene, then submits the option whose letter the question hash picks; logs every call."
    model = 'view-then-answer'
    def __init__(self, calls_file, phase): self.calls_file, self.phase = Path(calls_file), phase
    async def chat(self, messages, **kw):
        from treetrm.llm.protocol import LLMResponse
        first = messages[1]['content']
        key = question_key(first)
        with open(self.calls_file, 'a') as f: f.write(f'{key}\t{self.phase}\t{len(messages)}\n')
        await asyncio.sleep(DELAY_S)
        root = first.splitlines()[-1].split(': ', 1)[1].split(', ')[0]
        if len(messages) == 2: action = {'tool': 'view_node', 'args': {'node_id': root}}
        else:
            action = {'tool': 'submit_answer', 'args': {'answer': 'ABCD'[int(key, 16) % 4], 'evidence': root,
                                                        'reasoning': 'test'}}
        return LLMResponse(json.dumps({'reflect': {}, 'plan': 'test', 'action': action}),
                           usage={'prompt_tokens': 10, 'completion_tokens': 2})

def child(world, db, calls, run_id, phase):
    "Run inference over the world's questions; print the summary as JSON."
    from treetrm.core import project_root
    from treetrm.data import load_questions
    from treetrm.agent.inference import run_inference
    from treetrm.log import HarnessLog
    questions = load_questions(Path(world)/'questions.jsonl')
    async def main():
        with HarnessLog(db) as log:
            return await run_inference(questions, trees_dir=Path(world)/'trees', provider=ViewThenAnswer(calls, phase),
                                       log=log, run_id=run_id, skills_dir=project_root()/'prompts'/'skills',
                                       concurrency=CONCURRENCY, progress=False)
    r = asyncio.run(main())
    print(json.dumps(dict(n=r.n, n_new=r.n_new, accuracy=r.accuracy, stop_reason_counts=r.stop_reason_counts)))

# --- the test -------------------------------------------------------------------------------------------------------

def done_ids(db) -> set:
    "Question ids with a prediction, read through a plain sqlite3 connection (empty while the table is missing)."
    try:
        with sqlite3.connect(db, timeout=30) as c:
            return {r[0] for r in c.execute("SELECT question_id FROM predictions WHERE run_id = 'resume'")}
    except sqlite3.OperationalError: return set()

def calls_by_question(calls_file) -> dict:
    "(question key, phase) -> number of model calls."
    out = {}
    for line in Path(calls_file).read_text().splitlines():
        key, phase, _ = line.split('\t')
        out[key, phase] = out.get((key, phase), 0) + 1
    return out

def spawn(world, db, calls, phase, root):
    return subprocess.Popen([sys.executable, __file__, str(world), str(db), str(calls), 'resume', phase], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def test_sigkill_mid_run_then_resume(tmp_path):
    from treetrm.core import project_root
    from treetrm.sim.world import make_world
    from treetrm.data import load_questions
    from treetrm.trees import load_tree
    from treetrm.agent.navigate import user_message
    root = project_root()
    world = make_world(tmp_path/'world', seed=0, n_videos=N_VIDEOS)
    questions = load_questions(world/'questions.jsonl')
    trees = {v: load_tree(world/'trees'/v) for v in {q.video_id for q in questions}}
    key_of = {q.question_id: question_key(user_message(q, trees[q.video_id])) for q in questions}
    assert len(set(key_of.values())) == len(questions)  # keys identify questions
    db, calls = tmp_path/'harness.db', tmp_path/'calls.tsv'

    first = spawn(world, db, calls, 'first', root)
    deadline = time.monotonic() + 60
    while len(done_ids(db)) < 5:
        assert first.poll() is None, f'the first run ended before it could be killed: {first.communicate()}'
        assert time.monotonic() < deadline, 'the first run made no progress'
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL
    before = done_ids(db)
    assert 5 <= len(before) < len(questions)

    second = spawn(world, db, calls, 'second', root)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary['n'] == len(questions) and summary['n_new'] == len(questions) - len(before)
    assert summary['stop_reason_counts'] == {'finished': len(questions)}

    with sqlite3.connect(db) as c:
        per_q = dict(c.execute("SELECT question_id, count(*) FROM predictions "
                               "WHERE run_id = 'resume' GROUP BY question_id"))
        traces = {}
        for qid, step in c.execute("SELECT question_id, step FROM traces WHERE run_id = 'resume'"):
            traces.setdefault(qid, []).append(step)
        status = c.execute("SELECT status FROM runs WHERE run_id = 'resume'").fetchone()[0]
    assert per_q == {q.question_id: 1 for q in questions}  # every question exactly one prediction
    # no stale traces
    assert {qid: sorted(s) for qid, s in traces.items()} == {q.question_id: [-1, 0, 1] for q in questions}
    assert status == 'finished'

    n_calls = calls_by_question(calls)
    for q in questions:
        k = key_of[q.question_id]
        if q.question_id in before:  # completed before the kill: two calls then, none after
            assert (n_calls.get((k, 'first')), n_calls.get((k, 'second'), 0)) == (2, 0), q.question_id
        else:  # not completed: done whole by the second run
            assert n_calls.get((k, 'second')) == 2, q.question_id

if __name__ == '__main__':
    child(*sys.argv[1:6])
