("Elision that keeps the prefix: an over-budget conversation is elided once, down to the low-water mark, so the calls "
 "after it only append (a server's prefix cache serves them); every prompt fits the budget and the head never changes.")
import asyncio, dataclasses, json

import pytest

import treetrm.agent.navigate as navigate
from treetrm.agent.navigate import fit_context, run_agent
from treetrm.core import project_root
from treetrm.data import Question
from treetrm.llm.protocol import LLMResponse
from treetrm.trees import load_tree

BUDGET = 4000  # prompt tokens
TOOL_CHARS = 750  # each tool output: 750 / 2.5 = 300 tokens, plus 4 for its message


def chars_estimate(messages):
    "The cautious estimate, written out here: characters / 2.5, plus 4 a message."
    return int(sum(len(m['content']) for m in messages) / 2.5) + 4 * len(messages)


def extends(prompt, previous):
    "Whether `prompt` starts with every message of `previous`, unchanged (a prefix cache then serves all of it)."
    return prompt[:len(previous)] == previous


def broken_calls(prompts):
    "How many calls were not an extension of the call before them."
    return sum(not extends(p, q) for q, p in zip(prompts, prompts[1:]))


def conversation(turns:int, low_water:float):
    "The prompt of each call of a scripted conversation: system 1,000 tokens, a question, then (reply, tool output)."
    messages = [{'role': 'system', 'content': 'S' * 2500}, {'role': 'user', 'content': 'Q' * 250}]
    prompts = []
    for k in range(turns):
        fit_context(messages, BUDGET, low_water=low_water)
        prompts.append([dict(m) for m in messages])
        action = json.dumps({'plan': 'p' * 100, 'action': {'tool': 'view_node', 'args': {'node_id': f'n{k}'}}})
        messages += [{'role': 'assistant', 'content': action},
                     {'role': 'user', 'content': f'[tool result: view_node]\n{"x" * TOOL_CHARS}'}]
    return prompts


def test_a_long_conversation_breaks_its_prefix_rarely_and_always_fits():
    "Old: every call after the first overflow rewrites the history; low water 0.65: one call in four at most."
    old, new = conversation(16, low_water=1.0), conversation(16, low_water=navigate.LOW_WATER)
    # the head is (2500 + 250) / 2.5 + 8 = 1,108 tokens; a turn adds (172 reply + 775 output characters) / 2.5 + 8 =
    # 386.8: the conversation first goes over 4,000 tokens at call 8 (1108 + 8 * 386.8 = 4202)
    over = next(k for k, p in enumerate(old) if any('[elided:' in m['content'] for m in p))
    assert over == 8
    # eliding one output saves less than the turn that follows adds, so the old rule is over again at every call
    assert broken_calls(old) == 16 - over
    # the low-water rule cuts to at most 2,600 tokens (0.65 * 4000); the 1,400 tokens to the budget hold 3 appended
    # turns (3 * 386.8 = 1160), so at most one call in 4 breaks the prefix from the first overflow on, while the stubs
    # of the elided turns ((60 + 144) / 2.5 + 8 = 89.6 tokens each) and the last output fit under 2,600:
    # 1108 + 12 * 89.6 + 386.8 = 2570 at call 13
    assert broken_calls(new) <= (16 - over + 3) // 4
    assert broken_calls(new) < broken_calls(old) / 3
    for p in old + new:
        assert chars_estimate(p) <= BUDGET
        assert p[:2] == old[0][:2]  # system and question: never changed


def test_a_conversation_under_budget_is_left_alone_and_budget_zero_elides_all_but_the_last():
    "Under the budget nothing changes (no early elision); budget 0 (a refused call) elides every output but the last."
    prompts = conversation(8, low_water=navigate.LOW_WATER)
    assert broken_calls(prompts) == 0 and not any('[elided:' in m['content'] for p in prompts for m in p)
    messages = prompts[-1]
    assert fit_context(messages, 0) == 6  # the 8th prompt holds 7 turns: 6 outputs elided, the last kept
    assert [m['content'].startswith('[tool result: view_node]\n[elided:') for m in messages[3::2]] == [1] * 6 + [0]


class Scripted:
    "An agent model with a context budget that replays view_node calls and keeps every prompt it was sent."
    context_tokens, max_tokens = 8192, 192

    def __init__(self, model, node_ids, steps):
        self.model, self.seen = model, []
        self.replies = [json.dumps({'plan': 'look', 'action': {'tool': 'view_node', 'args': {'node_id': n}}})
                        for n in (node_ids * steps)[:steps]]

    async def chat(self, messages, **kw):
        self.seen.append([dict(m) for m in messages])
        reply = self.replies.pop(0) if self.replies else json.dumps({'action': {'tool': 'submit_answer', 'args': {
            'answer': 'A', 'evidence': 'e', 'reasoning': 'r'}}})
        return LLMResponse(reply, usage={})  # no prompt_tokens: the cautious 2.5 characters a token throughout


def loop_prompts(low_water, monkeypatch):
    "The prompts one agent run sent, with the loop's low-water mark set to `low_water`."
    monkeypatch.setattr(navigate, 'LOW_WATER', low_water)
    tree = load_tree(project_root()/'data'/'fixtures'/'trees'/'kT3vQx9LmPa')
    tree = dataclasses.replace(tree, nodes={k: dataclasses.replace(n, subtitle='word ' * 120) if n.level == 2 else n
                                            for k, n in tree.nodes.items()})
    q = Question('t-1', 'kT3vQx9LmPa', 'OCR Problems', 'What is said?', ('A. x', 'B. y', 'C. z', 'D. w'), 'A')
    l2 = sorted(k for k, n in tree.nodes.items() if n.level == 2)
    p = Scripted(f'scripted-{low_water}', l2, 24)
    r = asyncio.run(run_agent(q, tree, p, skills={}, mode='none', max_steps=25))
    assert r.stop_reason == 'finished', r.error
    return p.seen


def test_the_agent_loop_elides_to_the_low_water_mark(monkeypatch):
    "Through `run_agent`: the same scripted run breaks its prefix far less often, and every prompt fits 8,000 tokens."
    old, new = loop_prompts(1.0, monkeypatch), loop_prompts(0.65, monkeypatch)
    assert len(old) == len(new) == 25  # 24 tool calls and the answer
    over = next(k for k, p in enumerate(old) if any('[elided:' in m['content'] for m in p))
    assert broken_calls(old) == len(old) - over  # once over the budget, the old rule rewrites the history every call
    # a turn here is at most (1,194 output + 92 reply characters) / 2.5 + 8 = 522 tokens: the 35% of 8,000 tokens the
    # low-water mark frees (2,800) holds 5 of them, so at most one call in 6 breaks the prefix after the first overflow
    assert broken_calls(new) <= (len(new) - over + 5) // 6
    for p in old + new:
        assert chars_estimate(p) <= 8192 - 192
        assert p[:2] == new[0][:2]
