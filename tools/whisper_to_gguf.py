#!/usr/bin/env python3
"""Converts a CTranslate2 Whisper checkpoint folder into the GGUF file rill loads.

    tools/whisper_to_gguf.py SRC_DIR OUT.gguf [--name NAME]
    tools/whisper_to_gguf.py --pinned NAME      print the pinned sha256 of NAME's GGUF

SRC_DIR holds what tools/fetch_model.py puts in the cache for a Whisper model: model.bin
(CTranslate2's "WhisperSpec", fp16), config.json, tokenizer.json and vocabulary.txt. The layout of
the result is docs/whisper_gguf.md. In short: metadata under `whisper.*` (sizes, special token ids,
suppression lists, languages), the tokenizer under `tokenizer.ggml.*` (byte-level BPE, GPT-2
pre-tokenizer), every CTranslate2 variable that is a tensor under its own name (F16 matrices and
convolutions exactly as stored, F32 vectors widened from fp16 without rounding), CTranslate2's
scalars checked and turned into metadata, and `whisper/mel_filters`, the F32 [n_mels, 201]
Slaney mel filterbank that faster-whisper's FeatureExtractor uses.

The conversion is deterministic: the same inputs give the same bytes. PINNED maps the sha256 of a
known model.bin to the sha256 of its GGUF; for a known input the result is checked against its pin
and removed (exit 1) when it differs. The file is written as OUT.gguf.part and renamed when
complete. Needs numpy and gguf (tools/requirements.txt); nothing else, and no network.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
import gguf

# sha256(model.bin) -> (model name, sha256 of the GGUF this tool writes from it)
PINNED = {
    '1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a':
        ('whisper-tiny.en', '53366a5a7adabbabe7c2c65d9bc02ade664c3927065dd6d74a37ff1030357efa'),
    'd01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9':
        ('whisper-base', '4ab405934ddccc712540ebb263efced0c530567eca62d64bd30f0045d3944538'),
}

# CTranslate2's DataType enum (types.h) -> numpy
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
CT2_GELU = 3  # ctranslate2.specs.common_spec.Activation.GELU (the erf form)

N_FFT = 400
SAMPLE_RATE = 16000


def fail(msg):
    sys.exit('whisper_to_gguf: ' + msg)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


class Reader:
    """Bounds-checked little-endian reader over a bytes object."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            fail('model.bin is truncated at byte %d (needs %d more)' % (self.pos, n))
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack('<H', self.take(2))[0]

    def u32(self):
        return struct.unpack('<I', self.take(4))[0]

    def string(self):
        raw = self.take(self.u16())
        if not raw or raw[-1] != 0:
            fail('model.bin: a string at byte %d is not NUL-terminated' % self.pos)
        return raw[:-1].decode('utf-8')


def read_ct2(path):
    """model.bin -> (variables: name -> numpy array in the stored dtype and shape, aliases)."""
    with open(path, 'rb') as f:
        r = Reader(f.read())
    version = r.u32()
    if version != 6:
        fail('%s: CTranslate2 model version %d, expected 6' % (path, version))
    spec = r.string()
    if spec != 'WhisperSpec':
        fail('%s: spec %r, expected WhisperSpec' % (path, spec))
    r.u32()  # spec revision
    variables = {}
    for _ in range(r.u32()):
        name = r.string()
        shape = tuple(r.u32() for _ in range(r.u8()))
        code = r.u8()
        if code not in CT2_DTYPES:
            fail('%s: variable %s has dtype code %d' % (path, name, code))
        dtype = np.dtype(CT2_DTYPES[code]).newbyteorder('<')
        nbytes = r.u32()
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if nbytes != count * dtype.itemsize:
            fail('%s: variable %s holds %d bytes, shape %s needs %d'
                 % (path, name, nbytes, shape, count * dtype.itemsize))
        if name in variables:
            fail('%s: variable %s appears twice' % (path, name))
        variables[name] = np.frombuffer(r.take(nbytes), dtype=dtype).reshape(shape)
    aliases = {}
    for _ in range(r.u32()):
        alias = r.string()
        aliases[alias] = r.string()
    if r.pos != len(r.data):
        fail('%s: %d bytes after the aliases' % (path, len(r.data) - r.pos))
    return variables, aliases


def mel_filters(n_mels):
    """The Slaney-normalised triangular mel filterbank, [n_mels, N_FFT // 2 + 1], float32.

    Mel scale: linear (200/3 Hz per mel) below 1 kHz, logarithmic above (27 mels per factor 6.4);
    bands evenly spaced in mels from 0 to the mel of 8 kHz; each triangle scaled by 2 / its width
    in Hz. Computed in float64 and rounded once, as faster-whisper does (tools/ref_whisper.py
    checks the two agree bit for bit)."""
    fft_hz = np.arange(N_FFT // 2 + 1, dtype=np.float64) * (SAMPLE_RATE / N_FFT)
    hz_per_mel = 200.0 / 3
    knee_mel = 1000.0 / hz_per_mel
    log_step = np.log(6.4) / 27.0
    top_mel = knee_mel + np.log(8000.0 / 1000.0) / log_step
    mels = np.linspace(0.0, top_mel, n_mels + 2)
    hz = hz_per_mel * mels
    above = mels >= knee_mel
    hz[above] = 1000.0 * np.exp(log_step * (mels[above] - knee_mel))
    width = np.diff(hz)
    dist = hz.reshape(-1, 1) - fft_hz.reshape(1, -1)
    rising = -dist[:-2] / width[:-1, None]
    falling = dist[2:] / width[1:, None]
    tri = np.maximum(0.0, np.minimum(rising, falling))
    tri *= (2.0 / (hz[2:n_mels + 2] - hz[:n_mels]))[:, None]
    return tri.astype(np.float32)


def scalar(variables, name, expect=None):
    if name not in variables:
        fail('model.bin has no %s' % name)
    v = variables[name]
    if v.shape != ():
        fail('%s is not a scalar' % name)
    v = int(v)
    if expect is not None and v != expect:
        fail('%s = %d, this converter handles only %d' % (name, v, expect))
    return v


def count_layers(variables, prefix):
    n = 0
    while any(k.startswith('%s/layer_%d/' % (prefix, n)) for k in variables):
        n += 1
    return n


def shape_of(variables, name, rank):
    if name not in variables:
        fail('model.bin has no %s' % name)
    s = variables[name].shape
    if len(s) != rank:
        fail('%s has shape %s, expected rank %d' % (name, s, rank))
    return s


def convert(src, out, name):
    variables, aliases = read_ct2(os.path.join(src, 'model.bin'))
    with open(os.path.join(src, 'config.json'), encoding='utf-8') as f:
        config = json.load(f)
    with open(os.path.join(src, 'tokenizer.json'), encoding='utf-8') as f:
        tokenizer = json.load(f)
    with open(os.path.join(src, 'vocabulary.txt'), encoding='utf-8', newline='\n') as f:
        vocab = f.read().split('\n')
    if vocab and vocab[-1] == '':
        vocab.pop()

    # The architecture this file describes; anything else is refused rather than mis-described.
    scalar(variables, 'decoder/activation', CT2_GELU)
    scalar(variables, 'decoder/pre_norm', 1)
    scalar(variables, 'decoder/alibi', 0)
    scalar(variables, 'decoder/scale_embeddings', 0)
    scalar(variables, 'decoder/start_from_zero_embedding', 0)
    for alias, target in aliases.items():
        if (alias, target) != ('decoder/projection/weight', 'decoder/embeddings/weight'):
            fail('unexpected alias %s -> %s' % (alias, target))

    n_audio_state, n_mels, k1 = shape_of(variables, 'encoder/conv1/weight', 3)
    n_audio_ctx, d_pos = shape_of(variables, 'encoder/position_encodings/encodings', 2)
    n_vocab, n_text_state = shape_of(variables, 'decoder/embeddings/weight', 2)
    n_text_ctx, _ = shape_of(variables, 'decoder/position_encodings/encodings', 2)
    if k1 != 3 or d_pos != n_audio_state:
        fail('encoder conv1 / position encodings have unexpected shapes')
    n_audio_layer = count_layers(variables, 'encoder')
    n_text_layer = count_layers(variables, 'decoder')
    if len(vocab) != n_vocab:
        fail('vocabulary.txt has %d tokens, the embeddings %d' % (len(vocab), n_vocab))
    multilingual = n_vocab >= 51865  # as CTranslate2's and OpenAI's Whisper decide it

    ids = {}
    for i, text in enumerate(vocab):
        if text in ids and text != '':
            fail('vocabulary.txt: %r appears twice' % text)
        ids.setdefault(text, i)

    def token(*texts):
        for t in texts:
            if t in ids:
                return ids[t]
        fail('vocabulary.txt has none of %s' % ', '.join(texts))

    eot = token('<|endoftext|>')
    sot = token('<|startoftranscript|>')
    special = {
        'sot': sot,
        'eot': eot,
        'transcribe': token('<|transcribe|>'),
        'translate': token('<|translate|>'),
        'no_timestamps': token('<|notimestamps|>'),
        'no_speech': token('<|nospeech|>', '<|nocaptions|>'),
        'prev': token('<|startofprev|>'),
        'timestamp_begin': token('<|0.00|>'),
    }
    # Language tokens sit between sot and translate; a .en model has them in its vocabulary but
    # never uses them, so it gets no language list (and gguf cannot write empty arrays).
    lang_ids, lang_codes = [], []
    if multilingual:
        for i in config['lang_ids']:
            text = vocab[i]
            if not (text.startswith('<|') and text.endswith('|>')):
                fail('config.json lang id %d is %r, not a language token' % (i, text))
            lang_ids.append(int(i))
            lang_codes.append(text[2:-2])

    model = tokenizer['model']
    if model.get('type') != 'BPE':
        fail('tokenizer.json model is %r, expected BPE' % model.get('type'))
    pre = tokenizer.get('pre_tokenizer') or {}
    if pre.get('type') != 'ByteLevel' or pre.get('add_prefix_space') or not pre.get('use_regex'):
        fail('tokenizer.json pre-tokenizer %r is not GPT-2 byte-level' % pre)
    merges = [m if isinstance(m, str) else ' '.join(m) for m in model['merges']]
    for text, i in model['vocab'].items():
        if i >= n_vocab or vocab[i] != text:
            fail('tokenizer.json and vocabulary.txt disagree on id %d' % i)
    for added in tokenizer.get('added_tokens', []):
        if added['id'] >= n_vocab or vocab[added['id']] != added['content']:
            fail('added token %r is not id %d of vocabulary.txt' % (added['content'], added['id']))
    # Ids from eot up are Whisper's control tokens (tokenizer.json's added tokens, then the
    # timestamps, which only vocabulary.txt has); everything below is ordinary BPE vocabulary.
    token_types = [gguf.TokenType.NORMAL if i < eot else gguf.TokenType.CONTROL
                   for i in range(n_vocab)]

    w = gguf.GGUFWriter(out, 'whisper')
    w.add_name(name)
    u32 = w.add_uint32
    u32('whisper.n_mels', n_mels)
    u32('whisper.n_audio_ctx', n_audio_ctx)
    u32('whisper.n_audio_state', n_audio_state)
    u32('whisper.n_audio_head', scalar(variables, 'encoder/num_heads'))
    u32('whisper.n_audio_layer', n_audio_layer)
    u32('whisper.n_text_ctx', n_text_ctx)
    u32('whisper.n_text_state', n_text_state)
    u32('whisper.n_text_head', scalar(variables, 'decoder/num_heads'))
    u32('whisper.n_text_layer', n_text_layer)
    u32('whisper.n_vocab', n_vocab)
    w.add_bool('whisper.multilingual', multilingual)
    w.add_float32('whisper.layer_norm_epsilon', 1e-5)
    for key, value in special.items():
        u32('whisper.token.' + key, value)
    if multilingual:
        w.add_array('whisper.lang_ids', lang_ids)
        w.add_array('whisper.lang_codes', lang_codes)
    # config.json's lists are already expanded (CTranslate2's converter took them from the
    # Hugging Face generation config); they equal what faster-whisper computes for its default
    # suppress_tokens=[-1] (tools/ref_whisper.py checks that).
    for key, cfg in (('whisper.suppress_tokens', 'suppress_ids'),
                     ('whisper.begin_suppress_tokens', 'suppress_ids_begin')):
        values = [int(v) for v in config[cfg]]
        if any(v < 0 or v >= n_vocab for v in values):
            fail('config.json %s has an id out of range' % cfg)
        w.add_key_value(key, values, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)

    w.add_tokenizer_model('gpt2')
    w.add_tokenizer_pre('gpt-2')
    w.add_token_list(vocab)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_bos_token_id(sot)
    w.add_eos_token_id(eot)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    for vname in sorted(variables):
        v = variables[vname]
        if v.ndim == 0:
            continue  # scalars were checked or became metadata above
        if v.dtype == np.float16 and v.ndim >= 2 and vname.endswith('/weight'):
            data = np.ascontiguousarray(v)  # matrices and convolutions: the stored bytes
        elif v.dtype in (np.float16, np.float32):
            data = v.astype(np.float32)  # vectors, position encodings: fp16 -> fp32 is exact
        else:
            fail('tensor %s has dtype %s' % (vname, v.dtype))
        w.add_tensor(vname, data)
    w.add_tensor('whisper/mel_filters', mel_filters(n_mels))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('src', nargs='?', help='CTranslate2 Whisper folder (model.bin, ...)')
    ap.add_argument('out', nargs='?', help='GGUF file to write')
    ap.add_argument('--name', help='general.name (default: from the pinned table or the folder)')
    ap.add_argument('--pinned', metavar='NAME',
                    help='print the pinned sha256 of the GGUF of NAME (e.g. whisper-tiny.en)')
    args = ap.parse_args()
    if args.pinned:
        hits = [sha for name, sha in PINNED.values() if name == args.pinned]
        if not hits:
            fail('no pin for %s (known: %s)'
                 % (args.pinned, ', '.join(n for n, _ in PINNED.values())))
        print(hits[0])
        return
    if not args.src or not args.out:
        ap.error('SRC_DIR and OUT.gguf are required')

    for f in ('model.bin', 'config.json', 'tokenizer.json', 'vocabulary.txt'):
        if not os.path.isfile(os.path.join(args.src, f)):
            fail('%s has no %s' % (args.src, f))
    src_sha = sha256_of(os.path.join(args.src, 'model.bin'))
    pinned_name, pinned_sha = PINNED.get(src_sha, (None, None))
    name = args.name or pinned_name or os.path.basename(os.path.normpath(args.src))
    if name.endswith('-ct2'):
        name = name[:-4]

    tmp = args.out + '.part'
    try:
        convert(args.src, tmp, name)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    got = sha256_of(tmp)
    if pinned_sha is not None and args.name in (None, pinned_name) and got != pinned_sha:
        os.unlink(tmp)
        fail('%s converted to sha256 %s, pinned %s (gguf or numpy version differs from '
             'tools/requirements.txt?)' % (args.src, got, pinned_sha))
    os.replace(tmp, args.out)
    with open(args.out + '.sha256', 'w') as f:
        f.write('%s  %s\n' % (got, os.path.basename(args.out)))
    print(args.out)
    if pinned_sha is None:
        print('whisper_to_gguf: %s is not a pinned input; result sha256 %s' % (args.src, got),
              file=sys.stderr)


if __name__ == '__main__':
    main()
