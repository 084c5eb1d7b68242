"HarnessLog under concurrency and crashes: many asyncio tasks, two writing processes, a writer killed with SIGKILL."
import asyncio, itertools, json, multiprocessing as mp, os, signal, sqlite3, time
import pytest
from treetrm.core import canonical_json, sha256_text
from treetrm.log import HarnessLog

CTX = mp.get_context('spawn')  # children start clean (no inherited connection, lock or threads)

def steps(qid:str, n:int=3) -> list[dict]:
    "A deterministic agent trace for `qid`; its size makes each row span several database pages when n is large."
    return [dict(tool='view_node', args={'node_id': f'{qid}-{k}'}, output=sha256_text(f'{qid}-{k}') * 8)
            for k in range(n)]

def pred(run_id:str, i:int, n_steps:int=3) -> dict:
    "Prediction row number `i`; every field is a function of `i`, so a stored row can be checked field by field."
    qid = f'q{i:05d}'
    return dict(run_id=run_id, question_id=qid, video_id=f'v{i // 4}', task_type='Counting Problem',
                prediction='ABCD'[i % 4], answer='A', correct=i % 4 == 0, stop_reason='finished', steps_used=i % 7,
                tokens=100 + i, latency=0.01 * i, steps_json=steps(qid, n_steps))

def assert_rows_complete(log:HarnessLog, run_id:str, n_steps:int=3) -> list[int]:
    "Check every stored row of `run_id` equals the row that was written; returns the row numbers found."
    found = log.frame('predictions', run_id).drop('created_at').to_dicts()
    nums = [int(r['question_id'][1:]) for r in found]
    for r, i in zip(found, nums):
        assert r == {**pred(run_id, i, n_steps),
                     'steps_json': canonical_json(steps(r['question_id'], n_steps))}, r['question_id']
    return nums

def integrity(path) -> str:
    "`PRAGMA integrity_check` through a plain sqlite3 connection, independent of HarnessLog."
    with sqlite3.connect(path) as c: return c.execute('PRAGMA integrity_check').fetchone()[0]

def count_rows(path, table='predictions') -> int:
    "Row count through a plain sqlite3 connection (0 while the table does not exist yet)."
    try:
        with sqlite3.connect(path, timeout=30) as c: return c.execute(f'SELECT count(*) FROM {table}').fetchone()[0]
    except sqlite3.OperationalError: return 0

# --- (a) many asyncio tasks in one process -------------------------------------------------------------------------

def test_fifty_asyncio_tasks_lose_and_duplicate_nothing(tmp_path):
    n_tasks, per_task = 50, 20
    total = n_tasks * per_task
    async def task(log, t):
        inserted = 0
        for k in range(per_task):
            i = t * per_task + k
            rows = [pred('a', i), pred('a', (i + per_task) % total)]  # also re-insert a row the next task owns
            if t % 3 == 0: inserted += log.insert('predictions', rows)  # directly on the event loop
            elif t % 3 == 1: inserted += await asyncio.to_thread(log.insert, 'predictions', rows)
            else: inserted += await log.ainsert('predictions', rows)
            await asyncio.to_thread(log.record_llm_call, dict(call_id=f'c{i}', role='agent', prompt_tokens=i), 'a')
            await asyncio.sleep(0)
        return inserted
    async def main():
        with HarnessLog(tmp_path/'h.db') as log:
            counts = await asyncio.gather(*(task(log, t) for t in range(n_tasks)))
            return sum(counts), assert_rows_complete(log, 'a'), log.frame('llm_calls', 'a')
    inserted, nums, calls = asyncio.run(main())
    assert inserted == total  # each key counted as inserted exactly once, although every key was written twice
    assert sorted(nums) == list(range(total))
    assert calls.height == total and calls['call_id'].n_unique() == total
    assert integrity(tmp_path/'h.db') == 'ok'

# --- (b) two processes writing at once -----------------------------------------------------------------------------

def write_range(path, lo:int, hi:int, batch:int, start, results):
    "Child process: open the log after `start`, insert rows lo..hi-1 in small transactions, report the inserted count."
    start.wait()
    with HarnessLog(path) as log:
        log.start_run('mp', 'infer', params={'rows': 1000})  # both processes register the same run at the same time
        n = sum(log.insert('predictions', [pred('mp', i) for i in range(s, min(s + batch, hi))])
                for s in range(lo, hi, batch))
    results.put(n)

def test_two_processes_lose_nothing(tmp_path):
    path = tmp_path/'fresh'/'harness.db'  # neither process finds a database: both race to create the schema
    start, results = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=write_range, args=(path, lo, hi, 5, start, results))
             for lo, hi in [(0, 600), (400, 1000)]]
    for p in procs: p.start()
    start.set()
    for p in procs:
        p.join(90)
        assert p.exitcode == 0, 'a writer failed (see its traceback above)'
    counts = [results.get(timeout=10) for _ in procs]
    assert sum(counts) == 1000  # the 200 overlapping rows were inserted by exactly one of the two
    assert integrity(path) == 'ok'
    with HarnessLog(path) as log:
        assert sorted(assert_rows_complete(log, 'mp')) == list(range(1000))
        assert log.runs()['run_id'].to_list() == ['mp']
        assert (log.query('SELECT count(*) AS n, count(DISTINCT question_id) AS d FROM predictions').row(0)
                == (1000, 1000))

def open_fresh(path, barrier, results):
    "Child process: open (and so create) the log once all openers are ready; report its journal mode or the error."
    barrier.wait()
    try:
        with HarnessLog(path) as log: results.put(log.query('PRAGMA journal_mode').item())
    except Exception as e: results.put(repr(e))

@pytest.mark.slow
def test_racing_openers_of_a_new_file_all_get_wal(tmp_path):
    "Three processes create one harness.db at once, 15 times: each gets a WAL connection, none 'database is locked'."
    # Before `connect_wal` retried the WAL switch, about one opener in six failed at once (measured: 21 of 120), so 45
    # openers all succeeding by luck had a chance below 1 in 1000.
    outcomes = []
    for k in range(15):
        barrier, results = CTX.Barrier(3), CTX.Queue()
        procs = [CTX.Process(target=open_fresh, args=(tmp_path/f'r{k}'/'harness.db', barrier, results))
                 for _ in range(3)]
        for p in procs: p.start()
        for p in procs: p.join(60)
        outcomes += [results.get(timeout=10) for _ in procs]
    assert outcomes == ['wal'] * 45, [o for o in outcomes if o != 'wal'][:3]

# --- (c) a writer killed with SIGKILL ------------------------------------------------------------------------------

BATCH = 10  # rows per transaction

def big_pred(i:int) -> dict:
    ("A prediction whose ~20 KB `steps_json` makes writing (not encoding) dominate, "
     "so kills tend to land mid-transaction.")
    return {**pred('kill', i), 'steps_json': sha256_text(f'q{i:05d}') * 300}

def stream_rows(path, start:int):
    "Child process: insert big rows from `start` on, in batches, until killed."
    with HarnessLog(path) as log:
        for s in itertools.count(start, BATCH): log.insert('predictions', [big_pred(i) for i in range(s, s + BATCH)])

def kill_writer_after(path, start:int, more:int, delay:float):
    "Run a writer from `start`, SIGKILL it `delay` s after at least `more` new rows are visible."
    p = CTX.Process(target=stream_rows, args=(path, start))
    p.start()
    deadline = time.monotonic() + 60
    while count_rows(path) < start + more:
        assert p.is_alive() and time.monotonic() < deadline, 'the writer stopped or is too slow'
        time.sleep(0.005)
    time.sleep(delay)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL

def check_killed_db(path) -> int:
    ("The db after a kill: integrity ok, whole transactions only, a gap-free prefix of complete rows; "
     "returns the row count.")
    assert integrity(path) == 'ok'
    with HarnessLog(path) as log:  # reopening recovers the WAL
        found = log.frame('predictions', 'kill').drop('created_at').to_dicts()
        n = len(found)
        assert n % BATCH == 0, f'{n} rows: a transaction was half written'
        assert [r['question_id'] for r in found] == [f'q{i:05d}' for i in range(n)]  # nothing committed was lost
        for i, r in enumerate(found): assert r == big_pred(i), r['question_id']
    return n

@pytest.mark.parametrize('seed', [0, 1])
def test_sigkill_mid_stream_leaves_a_sound_db(tmp_path, seed):
    path, n = tmp_path/'harness.db', 0
    for cycle in range(4):  # kill, check, resume from where it stopped, kill again
        kill_writer_after(path, n, more=30 + 40 * cycle, delay=((seed * 7 + cycle * 3) % 5) * 0.004)
        n_new = check_killed_db(path)
        assert n_new >= n + 30 + 40 * cycle
        n = n_new
    with HarnessLog(path) as log:  # a resumed writer adds only what is missing
        assert log.insert('predictions', [big_pred(i) for i in range(n + 2 * BATCH)]) == 2 * BATCH
    assert integrity(path) == 'ok'
