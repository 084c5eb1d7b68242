"""What a newcomer tripped on (issue 51): files readable by others, `--help` without a checkout, a process pool in a
script without a `__main__` guard, README examples that do not clash, and messages that name what to write."""
import os, stat, subprocess, sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from treetrm.core import atomic_write_bytes, atomic_write_json, atomic_write_text


@contextmanager
def umask(mask: int):
    "Run the block under the process umask `mask`."
    old = os.umask(mask)
    try: yield
    finally: os.umask(old)


def mode(path: Path) -> int: return stat.S_IMODE(path.stat().st_mode)


# item 4: every file treetrm writes was 0600 (mkstemp), whatever the umask
@pytest.mark.parametrize('mask, file_mode, folder_mode', [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_written_files_get_the_mode_open_gives_under_the_umask(tmp_path, mask, file_mode, folder_mode):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from treetrm.figures import save_figure
    from treetrm.agent.versions import VersionStore
    with umask(mask):
        written = [atomic_write_bytes(tmp_path/'a.bin', b'x'), atomic_write_text(tmp_path/'b.txt', 'x'),
                   atomic_write_json(tmp_path/'c.json', {'a': 1})]
        fig, _ = plt.subplots()
        written += list(save_figure(fig, 'f', tmp_path/'figures', formats=('png', 'svg')).values())
        plt.close(fig)
        store = VersionStore(tmp_path/'ws', 'prompts')
        version = store.base/store.create({'system.md': 'x'}, parent=None, source='seed')
        plain = tmp_path/'plain.txt'
        plain.write_text('x')  # what a plain open(..., 'w') gives
    assert mode(plain) == file_mode
    written += [version/'system.md', version/'meta.json']
    assert {p.name: mode(p) for p in written} == {p.name: file_mode for p in written}
    assert mode(version) == folder_mode  # a skill version's folder: what a plain mkdir gives
