"""Rebuild the malformed tree files in this folder: `python tests/bad_inputs/trees/_make.py`.

Each case takes one small valid tree (1 scene → 2 events → 1 keyframe each) and breaks one rule;
expect.json says what its DataError must mention. Deterministic output.
"""
import copy, json
from pathlib import Path

HERE = Path(__file__).resolve().parent

def node(level, span, children=(), **card):
    return {'level': level, 'time_range': list(span), 'card': card, 'subtitle': '', 'children_ids': list(children)}

BASE = {'videoID': 'v', 'duration_seconds': 60.0, 'nodes': {
    'v_L1_000': node(1, (0, 60), ['v_L2_000', 'v_L2_001'], scene_summary='A street market.', visible_text=['MARKET']),
    'v_L2_000': node(2, (0, 30), ['v_L3_000'], event_description='A vendor weighs apples.'),
    'v_L2_001': node(2, (30, 60), ['v_L3_001'], event_description='A customer pays.'),
    'v_L3_000': node(3, (10, 12), frame_summary='Apples on a scale.', visible_text=['1.2 kg']),
    'v_L3_001': node(3, (40, 42), frame_summary='Coins on the counter.')}}

def broken(edit):
    "A deep copy of BASE with `edit(nodes)` applied."
    tree = copy.deepcopy(BASE); edit(tree['nodes']); return tree

def second_scene(nodes):
    nodes['v_L1_001'] = node(1, (30, 60), ['v_L2_001'], scene_summary='Closing time.')
    nodes['v_L1_000']['time_range'] = [0, 60]

CASES = {
    'dangling_child.json': broken(lambda n: n['v_L2_001']['children_ids'].append('v_L3_009')),
    'cycle.json': broken(lambda n: n.update(v_L2_002=node(2, (50, 60), ['v_L3_002']), v_L3_002=node(3, (50, 60), ['v_L2_002']))),
    'level_not_descending.json': broken(lambda n: n['v_L1_000']['children_ids'].append('v_L3_001') or n['v_L2_001'].update(children_ids=[])),
    'span_outside_parent.json': broken(lambda n: n['v_L3_001'].update(time_range=[55, 65])),
    'two_parents.json': broken(second_scene),
    'bad_level.json': broken(lambda n: n['v_L3_000'].update(level=4)),
    'level_string.json': broken(lambda n: n['v_L2_000'].update(level='2')),
    'reversed_span.json': broken(lambda n: n['v_L2_000'].update(time_range=[30, 0])),
    'orphan_event.json': broken(lambda n: n.update(v_L2_002=node(2, (50, 60), event_description='Nobody lists me.'))),
    'card_not_object.json': broken(lambda n: n['v_L3_001'].update(card='Coins on the counter.')),
    'children_not_list.json': broken(lambda n: n['v_L2_000'].update(children_ids='v_L3_000')),
    'missing_nodes.json': {'videoID': 'v', 'duration_seconds': 60.0},
    'empty_nodes.json': {'videoID': 'v', 'duration_seconds': 60.0, 'nodes': {}},
    'top_level_list.json': [BASE],
}

def main():
    for name, tree in CASES.items(): (HERE/name).write_text(json.dumps(tree, indent=1) + '\n', encoding='utf-8')
    (HERE/'invalid_json.json').write_text('{\n "videoID": "v",\n "nodes": {\n  "v_L1_000": {"level": 1,, "time_range": [0, 60]}\n }\n}\n', encoding='utf-8')
    (HERE/'non_utf8.json').write_bytes(json.dumps(BASE).replace('A street market.', 'March\xe9').encode('latin-1'))
    (HERE/'empty.json').write_text('', encoding='utf-8')
    (HERE/'self_child').mkdir(exist_ok=True)
    (HERE/'self_child'/'tree.json').write_text(json.dumps(broken(lambda n: n.update(v_L3_002=node(3, (5, 6), ['v_L3_002']))), indent=1) + '\n')
    (HERE/'no_tree_here').mkdir(exist_ok=True)
    (HERE/'no_tree_here'/'README.txt').write_text('A tree folder without tree.json: loading it must fail.\n')

if __name__ == '__main__': main()
