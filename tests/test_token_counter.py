("A model's prompt-token count: characters over the lowest ratio its server's replies showed (2.5 until one arrives), "
 "or its own tokenizer from `TREETRM_<ROLE>_TOKENIZER` with clear errors, and the agent loop using and teaching it.")
import asyncio, json, sys

import pytest

from treetrm.core import ConfigError
from treetrm.llm.config import RoleConfig, load_role_config
from treetrm.llm.costs import TokenCounter, estimate_tokens, load_tokenizer, token_counter
from treetrm.llm.protocol import LLMResponse

ENV = {'TREETRM_AGENT_MODEL': 'm', 'TREETRM_AGENT_BASE_URL': 'http://127.0.0.1:8000/v1'}


def one(chars:int) -> list[dict]:
    return [{'role': 'user', 'content': 'x' * chars}]


def test_the_ratio_starts_cautious_then_is_the_lowest_a_reply_showed():
    c = TokenCounter()
    assert c.count(one(3400)) == 3400 // 2.5 + 4 == estimate_tokens(one(3400))  # no reply yet: 2.5 characters a token
    c.observe(one(3400), {'prompt_tokens': 1004})  # 1,000 tokens of text and 4 of the message: 3.4 characters a token
    assert c.count(one(3400)) == 1004
    c.observe(one(3000), {'prompt_tokens': 1004})  # 3.0: denser text, so the count must grow
    assert c.count(one(3000)) == 1004 and c.count(one(3400)) == 3400 // 3 + 4
    c.observe(one(3800), {'prompt_tokens': 1004})  # 3.8 is not the lowest: kept at 3.0
    assert c.chars_per_token == 3.0


def test_replies_that_cannot_be_real_token_counts_teach_nothing():
    c = TokenCounter()
    for usage in ({}, None, {'prompt_tokens': 0}, {'prompt_tokens': 4}, {'prompt_tokens': 104}):  # 104: 100 c/token
        c.observe(one(10_000), usage)
    assert (c.chars_per_token, c.learned) == (2.5, False)
    c.observe(one(500), {'prompt_tokens': 1004})  # 0.5 characters a token (images, say): held at the floor, 1.0
    assert c.chars_per_token == 1.0


def test_a_tokenizer_counts_its_tokens_and_the_template(tmp_path):
    tokenizers = pytest.importorskip('tokenizers')
    vocab = {'[UNK]': 0, 'the': 1, 'jar': 2, 'says': 3, 'flour': 4}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token='[UNK]'))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path/'tokenizer.json'))
    encode = load_tokenizer(tmp_path/'tokenizer.json')
    assert encode('the jar says flour') == 4 and encode('') == 0
    c = TokenCounter(encode)
    msgs = [{'role': 'system', 'content': 'the jar'}, {'role': 'user', 'content': 'says flour now'}]
    assert c.count(msgs) == 2 + 3 + 5 * 3  # 5 words, 5 template tokens around each message and the reply's opening
    c.observe(msgs, {'prompt_tokens': 1})  # a tokenizer is exact: replies teach it nothing
    assert c.count(msgs) == 20
    env = ENV | {'TREETRM_AGENT_TOKENIZER': str(tmp_path/'tokenizer.json')}

    class Provider:
        model, config = 'tokenized-model', load_role_config('agent', env=env)
    assert token_counter(Provider()).count(msgs) == 20
    assert token_counter(Provider()) is token_counter(Provider())  # one counter per model and tokenizer


def test_a_missing_or_unreadable_tokenizer_says_what_where_and_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r'TREETRM_AGENT_TOKENIZER must be the path of .*tokenizer\.json'):
        load_role_config('agent', env=ENV | {'TREETRM_AGENT_TOKENIZER': str(tmp_path/'nope.json')})
    with pytest.raises(ConfigError, match=r'TREETRM_JUDGE_TOKENIZER names no file .*nope\.json'):
        load_tokenizer(tmp_path/'nope.json', 'judge')
    (tmp_path/'bad.json').write_text(json.dumps({'not': 'a tokenizer'}))
    pytest.importorskip('tokenizers')
    with pytest.raises(ConfigError, match=r"TREETRM_AGENT_TOKENIZER is not a tokenizer\.json .*bad\.json.*model's"):
        load_tokenizer(tmp_path/'bad.json')
    monkeypatch.setitem(sys.modules, 'tokenizers', None)  # the package not installed
    with pytest.raises(ConfigError, match='pip install tokenizers'):
        load_tokenizer(tmp_path/'bad.json')


class Measured:
    "An agent model whose server counts 3.4 characters a token (plus 4 a message) and replies with a search."
    context_tokens, max_tokens = 4096, 200

    def __init__(self, model, report=True): self.model, self.report, self.seen = model, report, []

    async def chat(self, messages, **kw):
        self.seen.append([dict(m) for m in messages])
        tokens = int(sum(len(m['content']) for m in messages) / 3.4) + 4 * len(messages)
        reply = {'action': {'tool': 'search', 'args': {'query': 'flour jar', 'k': 8}}}
        if len(self.seen) > 20: reply = {'action': {'tool': 'submit_answer', 'args': {'answer': 'A'}}}
        return LLMResponse(json.dumps(reply), usage={'prompt_tokens': tokens} if self.report else {})


def server_count(messages):
    "The prompt tokens `Measured`'s server reports for `messages`."
    return int(sum(len(m['content']) for m in messages) / 3.4) + 4 * len(messages)


def test_the_agent_loop_learns_the_ratio_and_so_uses_the_whole_context():
    "The loop teaches the model's counter from each reply; at 3.4 the same run elides later and fills the context."
    from treetrm.agent.navigate import run_agent
    from treetrm.core import project_root
    from treetrm.data import Question
    from treetrm.trees import load_tree
    tree = load_tree(project_root()/'data'/'fixtures'/'trees'/'kT3vQx9LmPa')
    q = Question('t-1', 'kT3vQx9LmPa', 'OCR Problems', 'What is on the jar?', ('A. x', 'B. y', 'C. z', 'D. w'), 'A')
    learned, cautious = Measured('measured-model'), Measured('unmeasured-model', report=False)
    for p in (learned, cautious):
        assert asyncio.run(run_agent(q, tree, p, skills={}, mode='none', max_steps=21)).stop_reason == 'finished'
    assert token_counter(learned).chars_per_token == pytest.approx(3.4, abs=0.01)
    assert token_counter(cautious).chars_per_token == 2.5
    room = 4096 - 200
    # at 2.5 characters a token the estimate is 3.4 / 2.5 = 1.36 times the server's count: elision holds the server's
    # count under about room / 1.36 (73.5% of the room); at the learned 3.4 only the room itself bounds it
    assert max(map(server_count, cautious.seen)) < 0.76 * room
    assert 0.9 * room < max(map(server_count, learned.seen)) <= room
