#!/usr/bin/env python3
"""Records what the outside oracle computes for Whisper, for rill's C tests to compare against.

The oracle is CTranslate2 through faster-whisper 1.2.1 (tools/requirements-speech.txt), always
pointed at a local CTranslate2 folder from tools/fetch_model.py, never at a model hub; the
tokenizer reference is the Hugging Face `tokenizers` library on that folder's tokenizer.json.

    tools/ref_whisper.py [--models DIR] [--out tests/data/ref/whisper] [--only PART ...]

PART is one of: tokens, mel, encoder, decoder, transcripts (default: all). --models is the
model cache (default $RILL_CACHE/models, i.e. ~/.cache/rill/models). What is written, and the
format of every file, is tests/data/ref/whisper/README.md.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Strings for the tokenizer reference: ordinary English, the pre-tokenizer's corner cases
# (contractions, digits, runs of spaces, newlines, punctuation), non-ASCII text, and texts of
# special tokens. Unicode is kept to characters assigned before Unicode 14 (rill's PCRE2 tables).
TOKEN_STRINGS = [
    'Hello world',
    ' Hello world',
    'The quick brown fox jumps over the lazy dog.',
    "I'm sure you've heard they'll say it's 'fine', don't you?",
    'In 1984, 3.14159 and 1,000,000 were numbers; 42nd street.',
    'multiple   spaces\tand\ttabs\n\nand new lines\r\n',
    '   leading and trailing   ',
    'Ça va? Über straße, naïve café, São Paulo.',
    'Привет, мир! Γειά σου κόσμε.',
    '日本語のテキストと中文文本',
    'emoji \U0001F600\U0001F389 and symbols ♪♫ ※ → ∞',
    'Mr. Smith said: "Well -- (really?) [yes] {no} <maybe> #1 @home 50% & more!"',
    'hello<|endoftext|>world',
    '<|startoftranscript|><|notimestamps|> The text.',
    'a timestamp <|0.00|> in text',
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 !@#$%^&*()_+-=",
    'supercalifragilisticexpialidocious antidisestablishmentarianism',
    '',
]


def default_cache():
    base = os.environ.get('RILL_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'rill')
    return os.path.join(base, 'models')


def write_tokens(models, out):
    """tokens.tsv: per model and string, HF tokenizers' ids (add_special_tokens=False, which is
    what faster-whisper's Tokenizer.encode passes) and its decode of them."""
    import tokenizers
    lines = ['# model\tmode\ttext_hex\tids\tdecoded_hex',
             '# made by tools/ref_whisper.py with tokenizers %s; see README.md'
             % tokenizers.__version__]
    for model in ('whisper-tiny.en', 'whisper-base'):
        folder = os.path.join(models, model + '-ct2')
        hf = tokenizers.Tokenizer.from_file(os.path.join(folder, 'tokenizer.json'))
        added = {t.content for t in hf.get_added_tokens_decoder().values()}
        for s in TOKEN_STRINGS:
            ids = hf.encode(s, add_special_tokens=False).ids
            text = hf.decode(ids, skip_special_tokens=False)
            # Which of rill's parse_special modes must reproduce HF: HF always cuts out its added
            # (special) tokens and treats every other text, timestamps included, as plain text.
            has_added = any(a in s for a in added)
            mode = 'special' if has_added else ('plain' if '<|' in s else 'both')
            lines.append('%s\t%s\t%s\t%s\t%s' % (model, mode, s.encode().hex(),
                                                 ','.join(map(str, ids)), text.encode().hex()))
    path = os.path.join(out, 'tokens.tsv')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('wrote', path)


def write_filters(out):
    """mel_filters.f32: FeatureExtractor().mel_filters, float32 row-major [80][201]; also checks
    that tools/whisper_to_gguf.py's own derivation gives the same bits."""
    from faster_whisper.feature_extractor import FeatureExtractor
    sys.path.insert(0, os.path.join(ROOT, 'tools'))
    import whisper_to_gguf
    fb = FeatureExtractor(feature_size=80).mel_filters
    if not np.array_equal(fb, whisper_to_gguf.mel_filters(80)):
        sys.exit('ref_whisper: whisper_to_gguf.mel_filters differs from faster-whisper\'s')
    path = os.path.join(out, 'mel_filters.f32')
    np.ascontiguousarray(fb, dtype='<f4').tofile(path)
    print('wrote', path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--models', default=default_cache())
    ap.add_argument('--out', default=os.path.join(ROOT, 'tests', 'data', 'ref', 'whisper'))
    ap.add_argument('--only', nargs='*',
                    choices=['tokens', 'mel', 'encoder', 'decoder', 'transcripts'])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = args.only or ['tokens', 'mel', 'encoder', 'decoder', 'transcripts']
    if 'tokens' in parts:
        write_tokens(args.models, args.out)
    if 'mel' in parts:
        write_filters(args.out)


if __name__ == '__main__':
    main()
