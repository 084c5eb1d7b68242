"""Rebuild the malformed question files in this folder: `python tests/bad_inputs/questions/_make.py`.

Each case breaks one rule; expect.json says what its DataError must mention. Deterministic output.
"""
import json
from pathlib import Path
import polars as pl

HERE = Path(__file__).resolve().parent

def native(qid, **over):
    "A valid question in treetrm's jsonl field names, with fields overridden."
    q = {'question_id': qid, 'video_id': 'vidA', 'task_type': 'Counting Problem', 'question': 'How many cups?',
         'options': ['A. 1', 'B. 2', 'C. 3', 'D. 4'], 'answer': 'B'}
    return {k: v for k, v in {**q, **over}.items() if v is not ...}

def hf(qid, **over):
    "A valid Hugging Face Video-MME record, with fields overridden (`...` drops a field)."
    q = {'video_id': '001', 'duration': 'short', 'domain': 'Life Record', 'sub_category': 'Cooking',
         'url': 'https://www.youtube.com/watch?v=vidA', 'videoID': 'vidA', 'question_id': qid, 'task_type': 'OCR Problems',
         'question': 'Which word is on the sign?', 'options': ['A. open', 'B. shut', 'C. exit', 'D. stop'], 'answer': 'C'}
    return {k: v for k, v in {**q, **over}.items() if v is not ...}

def jsonl(*rows): return ''.join(json.dumps(r) + '\n' for r in rows)
def text(name, s): (HERE/name).parent.mkdir(parents=True, exist_ok=True); (HERE/name).write_text(s, encoding='utf-8')
def parquet(name, rows, **schema):
    cols = {k: (pl.List(pl.String) if k == 'options' else pl.String) for k in rows[0]}
    pl.DataFrame(rows, schema={**cols, **schema}).write_parquet(HERE/name, statistics=False)

def main():
    parquet('missing_column.parquet', [hf('1-1', answer=...), hf('1-2', answer=...)])
    parquet('wrong_type_answer.parquet', [hf('1-1', answer=3), hf('1-2', answer=1)], answer=pl.Int64)
    parquet('null_question_id.parquet', [hf('1-1'), hf(None)])
    text('not_parquet.parquet', 'this is a text file, not parquet\n')
    text('missing_field.jsonl', jsonl(native('q1'), native('q2', task_type=...), native('q3')))
    text('duplicate_id.jsonl', jsonl(native('q1'), native('q2'), native('q1')))
    text('answer_not_in_options.json', json.dumps([hf('1-1'), hf('1-2', answer='E')], indent=1))
    text('empty_options.jsonl', jsonl(native('q1', options=[])))
    text('one_option.jsonl', jsonl(native('q1'), native('q2', options=['A. 1'], answer='A')))
    text('options_not_list.jsonl', jsonl(native('q1', options='A. 1; B. 2; C. 3; D. 4')))
    text('answer_number.jsonl', jsonl(native('q1', answer=2)))
    (HERE/'non_utf8.jsonl').write_bytes(jsonl(native('q1')).encode() + '{"question": "caf\xe9"}\n'.encode('latin-1'))
    text('empty.jsonl', '')
    text('whitespace_only.json', '\n   \n')
    text('invalid_json.json', '[\n {"question_id": "1-1",\n  "answer": "A",,\n }\n]\n')
    text('broken_line.jsonl', jsonl(native('q1')) + jsonl(native('q2'))[:40] + '\n' + jsonl(native('q3')))
    text('line_not_object.jsonl', '[1, 2, 3]\n')
    text('options_out_of_order.jsonl', jsonl(native('q1', options=['A. 1', 'C. 3', 'B. 2', 'D. 4'])))
    text('hf_missing_videoID.json', json.dumps([hf('1-1', videoID=...)], indent=1))
    text('per_video_wrong_type/aaa.json', json.dumps([native('a1', video_id=...)], indent=1))
    text('per_video_wrong_type/bbb.json', json.dumps([native('b1', video_id=...), native('b2', video_id=..., question=42)], indent=1))
    text('per_video_not_list/vid.json', json.dumps({'question_id': 'x'}))

if __name__ == '__main__': main()
