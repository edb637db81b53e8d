#!/usr/bin/env python3
"""tools/whisper_to_gguf.py on small synthetic CTranslate2 checkpoints: what it writes, and that
it refuses what it cannot describe.

A checkpoint here is written from scratch in CTranslate2's model.bin format (version 6,
WhisperSpec: u16-length NUL-terminated strings, per variable rank, dims, type code, byte count,
bytes; then aliases), with a toy vocabulary (256 byte tokens, a few merges, Whisper's special
tokens and three timestamps). The conversion must keep every tensor's values, use F16 exactly
for 2-D/3-D weights and F32 for the rest, write the metadata of docs/whisper_gguf.md, give the
same bytes twice, and on every malformed input exit non-zero with a message naming the problem,
leaving no output file behind. The real checkpoints are converted by set-up (which checks the
pinned sha256) and read back by tests/test_whisper_vocab.c.

Usage: test_whisper_convert.py SOURCE_DIR (run with the project's .venv: numpy, gguf). Prints
'N passed, N failed' last.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

SRC = sys.argv[1]
TOOL = os.path.join(SRC, 'tools', 'whisper_to_gguf.py')
sys.path.insert(0, os.path.join(SRC, 'tools'))
import gguf  # noqa: E402
import whisper_to_gguf  # noqa: E402

D, HEADS, N_MELS, AUDIO_CTX, TEXT_CTX = 8, 2, 80, 6, 5
results = []


def check(name, fn):
    try:
        fn()
        results.append((name, None))
        print('ok   ', name)
    except Exception as e:  # a failed check, reported and counted
        results.append((name, e))
        print('FAIL ', name, '-', e)


def vocab():
    """256 byte-level tokens, 4 merges, then the special tokens (ids from eot up)."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tokens = [chr(c) for _, c in sorted(zip(bs, cs))]
    merges = ['h e', 'l l', 'he ll', 'Ġ w']
    words = ['he', 'll', 'hell', 'Ġw']
    special = ['<|endoftext|>', '<|startoftranscript|>', '<|en|>', '<|translate|>',
               '<|transcribe|>', '<|startoflm|>', '<|startofprev|>', '<|nocaptions|>',
               '<|notimestamps|>', '<|0.00|>', '<|0.02|>', '<|0.04|>']
    return byte_tokens + words, merges, special


def variables(n_vocab, rng):
    v = {}
    f16 = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    v['encoder/conv1/weight'] = f16(D, N_MELS, 3)
    v['encoder/conv1/bias'] = f16(D)
    v['encoder/conv2/weight'] = f16(D, D, 3)
    v['encoder/conv2/bias'] = f16(D)
    v['encoder/position_encodings/encodings'] = f16(AUDIO_CTX, D)
    v['encoder/num_heads'] = np.array(HEADS, dtype=np.int16)
    for p in ('encoder/layer_0/self_attention', 'decoder/layer_0/self_attention'):
        v[p + '/layer_norm/gamma'] = f16(D)
        v[p + '/layer_norm/beta'] = f16(D)
        v[p + '/linear_0/weight'] = f16(3 * D, D)
        v[p + '/linear_0/bias'] = f16(3 * D)
        v[p + '/linear_1/weight'] = f16(D, D)
        v[p + '/linear_1/bias'] = f16(D)
    for p in ('encoder/layer_0/ffn', 'decoder/layer_0/ffn'):
        v[p + '/layer_norm/gamma'] = f16(D)
        v[p + '/layer_norm/beta'] = f16(D)
        v[p + '/linear_0/weight'] = f16(4 * D, D)
        v[p + '/linear_0/bias'] = f16(4 * D)
        v[p + '/linear_1/weight'] = f16(D, 4 * D)
        v[p + '/linear_1/bias'] = f16(D)
    p = 'decoder/layer_0/attention'
    v[p + '/layer_norm/gamma'] = f16(D)
    v[p + '/layer_norm/beta'] = f16(D)
    v[p + '/linear_0/weight'] = f16(D, D)
    v[p + '/linear_0/bias'] = f16(D)
    v[p + '/linear_1/weight'] = f16(2 * D, D)
    v[p + '/linear_1/bias'] = f16(2 * D)
    v[p + '/linear_2/weight'] = f16(D, D)
    v[p + '/linear_2/bias'] = f16(D)
    for side in ('encoder', 'decoder'):
        v[side + '/layer_norm/gamma'] = f16(D)
        v[side + '/layer_norm/beta'] = f16(D)
    v['decoder/embeddings/weight'] = f16(n_vocab, D)
    v['decoder/position_encodings/encodings'] = f16(TEXT_CTX, D)
    v['decoder/num_heads'] = np.array(HEADS, dtype=np.int16)
    v['decoder/activation'] = np.array(3, dtype=np.int8)
    v['decoder/pre_norm'] = np.array(1, dtype=np.int8)
    v['decoder/alibi'] = np.array(0, dtype=np.int8)
    v['decoder/scale_embeddings'] = np.array(0, dtype=np.int8)
    v['decoder/start_from_zero_embedding'] = np.array(0, dtype=np.int8)
    return v


CODES = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2,
         np.dtype(np.int32): 3, np.dtype(np.float16): 4}


def pack_str(s):
    b = s.encode() + b'\0'
    return struct.pack('<H', len(b)) + b


def model_bin(v, aliases, version=6, spec='WhisperSpec'):
    out = struct.pack('<I', version) + pack_str(spec) + struct.pack('<II', 3, len(v))
    for name in sorted(v):
        a = v[name]
        out += pack_str(name) + struct.pack('<B', a.ndim)
        out += b''.join(struct.pack('<I', d) for d in a.shape)
        raw = a.astype(a.dtype.newbyteorder('<')).tobytes()
        out += struct.pack('<BI', CODES[a.dtype], len(raw)) + raw
    out += struct.pack('<I', len(aliases))
    for a, t in aliases:
        out += pack_str(a) + pack_str(t)
    return out


def write_checkpoint(folder, mutate=None):
    """A synthetic checkpoint in folder; mutate(parts) may change any part first."""
    toks, merges, special = vocab()
    all_tokens = toks + special
    eot = len(toks)
    parts = {
        'variables': variables(len(all_tokens), np.random.default_rng(7)),
        'aliases': [('decoder/projection/weight', 'decoder/embeddings/weight')],
        'version': 6, 'spec': 'WhisperSpec',
        'vocabulary': all_tokens,
        'tokenizer': {
            'model': {'type': 'BPE', 'vocab': {t: i for i, t in enumerate(toks)},
                      'merges': merges},
            'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'use_regex': True},
            'added_tokens': [{'id': eot + i, 'content': s, 'special': True}
                             for i, s in enumerate(special[:9])],
        },
        'config': {'suppress_ids': [1, 2, eot + 4], 'suppress_ids_begin': [220, eot],
                   'lang_ids': [eot + 2]},
    }
    if mutate:
        mutate(parts)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, 'model.bin'), 'wb') as f:
        f.write(model_bin(parts['variables'], parts['aliases'], parts['version'], parts['spec']))
    with open(os.path.join(folder, 'vocabulary.txt'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(parts['vocabulary']) + '\n')
    with open(os.path.join(folder, 'tokenizer.json'), 'w', encoding='utf-8') as f:
        json.dump(parts['tokenizer'], f)
    with open(os.path.join(folder, 'config.json'), 'w') as f:
        json.dump(parts['config'], f)
    return parts


def convert(folder, out, *extra):
    return subprocess.run([sys.executable, TOOL, folder, out, *extra], capture_output=True,
                          text=True, timeout=120)


def sha(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


tmp = tempfile.mkdtemp(prefix='rill-whisper-convert-')


def test_converts_exactly():
    folder = os.path.join(tmp, 'good')
    parts = write_checkpoint(folder)
    out = os.path.join(tmp, 'good.gguf')
    p = convert(folder, out)
    assert p.returncode == 0, p.stderr
    assert 'not a pinned input' in p.stderr, p.stderr
    r = gguf.GGUFReader(out)
    f = {k: v.contents() for k, v in r.fields.items()}
    assert f['general.architecture'] == 'whisper'
    assert f['general.name'] == 'good'
    n_vocab = len(parts['vocabulary'])
    eot = n_vocab - 12
    want = {'whisper.n_mels': N_MELS, 'whisper.n_audio_ctx': AUDIO_CTX,
            'whisper.n_audio_state': D, 'whisper.n_audio_head': HEADS,
            'whisper.n_audio_layer': 1, 'whisper.n_text_ctx': TEXT_CTX,
            'whisper.n_text_state': D, 'whisper.n_text_head': HEADS, 'whisper.n_text_layer': 1,
            'whisper.n_vocab': n_vocab, 'whisper.multilingual': False,
            'whisper.token.eot': eot, 'whisper.token.sot': eot + 1,
            'whisper.token.translate': eot + 3, 'whisper.token.transcribe': eot + 4,
            'whisper.token.prev': eot + 6, 'whisper.token.no_speech': eot + 7,
            'whisper.token.no_timestamps': eot + 8, 'whisper.token.timestamp_begin': eot + 9,
            'whisper.suppress_tokens': [1, 2, eot + 4],
            'whisper.begin_suppress_tokens': [220, eot],
            'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.pre': 'gpt-2',
            'tokenizer.ggml.tokens': parts['vocabulary'],
            'tokenizer.ggml.merges': parts['tokenizer']['model']['merges'],
            'tokenizer.ggml.token_type': [1] * eot + [3] * 12,
            'tokenizer.ggml.bos_token_id': eot + 1, 'tokenizer.ggml.eos_token_id': eot,
            'tokenizer.ggml.add_bos_token': False, 'tokenizer.ggml.add_eos_token': False}
    for k, v in want.items():
        assert f.get(k) == v, '%s = %r, want %r' % (k, f.get(k), v)
    assert abs(f['whisper.layer_norm_epsilon'] - 1e-5) < 1e-12
    assert 'whisper.lang_ids' not in f and 'whisper.lang_codes' not in f  # not multilingual
    assert r.fields['whisper.suppress_tokens'].types[-1] == gguf.GGUFValueType.INT32
    tensors = {t.name: t for t in r.tensors}
    arrays = {k: a for k, a in parts['variables'].items() if a.ndim > 0}
    assert set(tensors) == set(arrays) | {'whisper/mel_filters'}, sorted(set(tensors) ^ set(arrays))
    for name, a in arrays.items():
        t = tensors[name]
        f16 = a.ndim >= 2 and name.endswith('/weight')
        assert t.tensor_type == (gguf.GGMLQuantizationType.F16 if f16 else
                                 gguf.GGMLQuantizationType.F32), name
        assert list(t.shape) == list(reversed(a.shape)), (name, list(t.shape), a.shape)
        got = np.asarray(t.data).reshape(a.shape)
        if f16:
            assert got.tobytes() == a.tobytes(), name
        else:
            assert np.array_equal(got, a.astype(np.float32)), name
    fb = tensors['whisper/mel_filters']
    assert list(fb.shape) == [201, N_MELS] and fb.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(fb.data).reshape(N_MELS, 201),
                          whisper_to_gguf.mel_filters(N_MELS))
    with open(out + '.sha256') as fh:
        assert fh.read().split()[0] == sha(out)
    # deterministic
    out2 = os.path.join(tmp, 'good2.gguf')
    assert convert(folder, out2, '--name', 'good').returncode == 0
    assert sha(out) == sha(out2), 'two conversions differ'


def test_multilingual_languages():
    def grow(parts):
        # 51865 tokens make a vocabulary multilingual; pad with plain byte-level words
        toks = parts['vocabulary']
        n_special = 12
        plain, special = toks[:-n_special], toks[-n_special:]
        filler = ['Ġx%d' % i for i in range(51865 - len(toks))]
        parts['vocabulary'] = plain + filler + special
        eot = len(plain) + len(filler)
        parts['tokenizer']['model']['vocab'] = {t: i for i, t in enumerate(plain + filler)}
        for i, a in enumerate(parts['tokenizer']['added_tokens']):
            a['id'] = eot + i
        parts['config'] = {'suppress_ids': [eot + 4], 'suppress_ids_begin': [eot],
                           'lang_ids': [eot + 2]}
        parts['variables']['decoder/embeddings/weight'] = np.zeros((51865, D), np.float16)
    folder = os.path.join(tmp, 'multi')
    write_checkpoint(folder, grow)
    out = os.path.join(tmp, 'multi.gguf')
    p = convert(folder, out)
    assert p.returncode == 0, p.stderr
    f = {k: v.contents() for k, v in gguf.GGUFReader(out).fields.items()}
    assert f['whisper.multilingual'] is True
    assert f['whisper.lang_codes'] == ['en'], f.get('whisper.lang_codes')
    assert f['whisper.lang_ids'] == [51865 - 12 + 2]


# Each malformed checkpoint and the words its error must contain.
BAD = [
    ('version', lambda p: p.update(version=5), 'version 5'),
    ('spec', lambda p: p.update(spec='TransformerSpec'), 'TransformerSpec'),
    ('tanh GELU', lambda p: p['variables'].update(
        {'decoder/activation': np.array(1, dtype=np.int8)}), 'decoder/activation'),
    ('post-norm', lambda p: p['variables'].update(
        {'decoder/pre_norm': np.array(0, dtype=np.int8)}), 'decoder/pre_norm'),
    ('other alias', lambda p: p['aliases'].append(('a/b', 'c/d')), 'unexpected alias'),
    ('no conv1', lambda p: p['variables'].pop('encoder/conv1/weight'), 'encoder/conv1/weight'),
    ('short vocabulary', lambda p: p['vocabulary'].pop(), 'vocabulary.txt has'),
    ('duplicate token', lambda p: p['vocabulary'].__setitem__(5, p['vocabulary'][6]),
     'appears twice'),
    ('no sot', lambda p: p['vocabulary'].__setitem__(p['vocabulary'].index(
        '<|startoftranscript|>'), '<|sot|>'), 'startoftranscript'),
    ('tokenizer disagrees', lambda p: p['tokenizer']['model']['vocab'].update({'he': 7}),
     'disagree on id 7'),
    ('not BPE', lambda p: p['tokenizer']['model'].update(type='Unigram'), 'Unigram'),
    ('prefix space', lambda p: p['tokenizer']['pre_tokenizer'].update(add_prefix_space=True),
     'not GPT-2 byte-level'),
    ('suppress out of range', lambda p: p['config']['suppress_ids'].append(10 ** 6),
     'out of range'),
    ('int32 tensor', lambda p: p['variables'].update(
        {'encoder/conv1/bias': np.zeros(D, np.int32)}), 'dtype int32'),
]


def make_bad_test(label, mutate, words):
    def t():
        folder = os.path.join(tmp, 'bad-' + label.replace(' ', '-'))
        write_checkpoint(folder, mutate)
        out = os.path.join(tmp, 'bad.gguf')
        p = convert(folder, out)
        assert p.returncode != 0, 'accepted'
        assert words in p.stderr, p.stderr.strip().splitlines()[-1:]
        assert 'Traceback' not in p.stderr, p.stderr
        assert not os.path.exists(out) and not os.path.exists(out + '.part'), 'left a file'
    return t


def test_truncated():
    folder = os.path.join(tmp, 'trunc')
    write_checkpoint(folder)
    path = os.path.join(folder, 'model.bin')
    with open(path, 'rb') as f:
        whole = f.read()
    for cut in (0, 3, 10, 40, len(whole) // 2, len(whole) - 1):
        with open(path, 'wb') as f:
            f.write(whole[:cut])
        out = os.path.join(tmp, 'trunc.gguf')
        p = convert(folder, out)
        assert p.returncode != 0, 'cut at %d accepted' % cut
        assert 'truncated' in p.stderr or 'version' in p.stderr, (cut, p.stderr)
        assert 'Traceback' not in p.stderr, p.stderr
        assert not os.path.exists(out) and not os.path.exists(out + '.part')
    with open(path, 'wb') as f:
        f.write(whole + b'\0\0')
    p = convert(folder, os.path.join(tmp, 'trunc.gguf'))
    assert p.returncode != 0 and 'bytes after the aliases' in p.stderr, p.stderr


def test_missing_file():
    folder = os.path.join(tmp, 'missing')
    write_checkpoint(folder)
    os.unlink(os.path.join(folder, 'tokenizer.json'))
    p = convert(folder, os.path.join(tmp, 'missing.gguf'))
    assert p.returncode != 0 and 'has no tokenizer.json' in p.stderr, p.stderr


def test_pin_mismatch_removes_result():
    folder = os.path.join(tmp, 'pinned')
    write_checkpoint(folder)
    src_sha = sha(os.path.join(folder, 'model.bin'))
    out = os.path.join(tmp, 'pinned.gguf')
    saved = dict(whisper_to_gguf.PINNED)
    whisper_to_gguf.PINNED[src_sha] = ('pinned-model', '0' * 64)
    argv = sys.argv
    sys.argv = [TOOL, folder, out]
    try:
        whisper_to_gguf.main()
        raise AssertionError('a result that differs from its pin was kept')
    except SystemExit as e:
        assert 'pinned ' + '0' * 64 in str(e.code), e.code
    finally:
        sys.argv = argv
        whisper_to_gguf.PINNED.clear()
        whisper_to_gguf.PINNED.update(saved)
    assert not os.path.exists(out) and not os.path.exists(out + '.part')
    # the pins of the real checkpoints are printed for set-up
    p = subprocess.run([sys.executable, TOOL, '--pinned', 'whisper-tiny.en'], capture_output=True,
                       text=True)
    assert p.returncode == 0 and len(p.stdout.strip()) == 64, p
    p = subprocess.run([sys.executable, TOOL, '--pinned', 'nope'], capture_output=True, text=True)
    assert p.returncode != 0 and 'no pin for nope' in p.stderr


check('converts exactly', test_converts_exactly)
check('multilingual languages', test_multilingual_languages)
for label, mutate, words in BAD:
    check('refuses: ' + label, make_bad_test(label, mutate, words))
check('refuses: truncated model.bin', test_truncated)
check('refuses: missing file', test_missing_file)
check('pin mismatch removes the result', test_pin_mismatch_removes_result)

shutil.rmtree(tmp, ignore_errors=True)
failed = sum(1 for _, e in results if e is not None)
print('%d passed, %d failed' % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
