"""Dict- and list-valued notebook parameters through papermill's command line (issue 32, item 1): `-p` hands a notebook
text, so `-p settings "{'train.gate.tau': 0.1}"` arrives as a string. The configuration page's command and its
`-p settings` recipes (docs/howto/configuration.md), and `build.ipynb -p bounds "{...}"`, run as written; a bad value is
a ConfigError naming it."""
import json, re, shlex, subprocess

import papermill.cli
import pytest

from treetrm.train.settings import stage_config
from treetrm.core import ConfigError, project_root, read_json
from treetrm.sim.world import make_world
from treetrm.build.video import make_synthetic_videos

ROOT = project_root()
CONFIGURATION = (ROOT/'docs'/'howto'/'configuration.md').read_text(encoding='utf-8')  # the how-to page
SETTINGS_COMMAND = "-p settings \"{'train.gate.tau': 0.1}\""


def papermill_value(text: str):
    "What papermill's `-p name text` hands the notebook (its own conversion: numbers and True/False/None, else text)."
    return papermill.cli._resolve_type(text)


def readme_values(name: str) -> list:
    "Every `-p <name> \"...\"` configuration.md writes, as papermill passes it (markdown line breaks inside are kept)."
    return [papermill_value(t) for t in re.findall(rf'-p {name} "([^"]*)"', CONFIGURATION)]


def test_readme_settings_are_read_as_written():
    values = readme_values('settings')
    assert len(values) >= 2 and all(isinstance(v, str) for v in values)  # the configuration command and the recipe
    configs = [stage_config(None, v) for v in values]
    assert configs[0].train.gate.tau == 0.1
    recipe = next(c for v, c in zip(values, configs) if 'train.futility' in v)  # rule gate_end45_nofut
    assert (recipe.train.gate.alpha_final, recipe.train.gate.alpha_prov, recipe.train.futility) == (0.045, 0.045, False)


BAD = [('[1, 2]', 'settings'), ('nofile.yaml', 'settings'), ("{'a': 1, 'a': 2}", 'settings'),
       ("{'train.gate.tau' 0.1}", 'settings'), ('Counting', 'floor_k')]


@pytest.mark.parametrize('value, name', BAD)
def test_a_bad_parameter_is_a_config_error_naming_it(value, name):
    with pytest.raises(ConfigError, match=rf'parameter={name}\]'):
        stage_config(None, value) if name == 'settings' else stage_config(None, None, floor_k=value)


@pytest.mark.notebooks
@pytest.mark.slow
def test_readme_configuration_command_runs_through_papermill(tmp_path):
    "configuration.md's command line, word for word, on a small world: its config file, `-p epochs 4`, the settings."
    (command, ) = [l for l in CONFIGURATION.splitlines() if SETTINGS_COMMAND in l]
    my_yaml = tmp_path/'my.yaml'
    my_yaml.write_text(re.search(r'```yaml\n(.*?)```', CONFIGURATION, re.S)[1])
    world, ws, out = make_world(tmp_path/'world', seed=0, n_videos=8), tmp_path/'ws', tmp_path/'out.ipynb'
    words = [str(out) if w == 'out.ipynb' else str(my_yaml) if w == 'my.yaml' else w for w in shlex.split(command)]
    small = ['-p', 'workspace', str(ws), '-p', 'data_dir', str(world), '-p', 'min_ladder_units', '4',  # a short run
             '-p', 'batch_size', '8', '-p', 'concurrency', '4', '-p', 'patience', '1', '-p', 'show_steps', 'False']
    done = subprocess.run(words + small, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    frozen = read_json(ws/'runs'/'v3'/'checkpoint.json')['state']['structural']['config']
    assert frozen['gate']['tau'] == 0.1  # -p settings
    assert frozen['epochs'] == 4 and frozen['batch']['batch_size'] == 8  # parameters win over my.yaml (3, 16)
    assert (frozen['gate']['alpha'], frozen['gate']['min_n'], frozen['acceptance']) == (0.05, 20, 'gate')  # my.yaml
    shown = ''.join(''.join(o.get('data', {}).get('text/plain', ''))
                    for c in json.loads(out.read_text())['cells'] for o in c.get('outputs', []))
    assert re.search(r'│ train\.gate\.tau +┆ 0\.1 +│', shown)  # the resolved configuration table says so


@pytest.mark.notebooks
@pytest.mark.slow
def test_build_notebook_takes_bounds_as_text(tmp_path):
    "`build.ipynb -p bounds \"{...}\"` through papermill's command line: the bounds reach the builder."
    videos = make_synthetic_videos(tmp_path/'videos', n_videos=1, n_shots=2, seconds=6.0)
    trees, out = tmp_path/'trees', tmp_path/'out.ipynb'
    bounds = "{'l3_step_s': 2.0, 'frames_per_call': 3}"  # one keyframe per 2 s instead of per second
    words = ['.venv/bin/papermill', 'nbs/build.ipynb', str(out), '-k', 'python3', '-p', 'videos', str(videos),
             '-p', 'trees_dir', str(trees), '-p', 'bounds', bounds]
    done = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    tree = read_json(trees/'synth00'/'tree.json')
    events = [n for n in tree['nodes'].values() if n['level'] == 2]
    assert events and all(len(e['children_ids']) == 3 for e in events)  # 6 s events, a keyframe every 2 s
