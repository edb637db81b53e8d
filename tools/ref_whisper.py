#!/usr/bin/env python3
"""Records what the outside oracle computes for Whisper, for rill's C tests to compare against.

The oracle is CTranslate2 through faster-whisper 1.2.1 (tools/requirements-speech.txt), always
pointed at a local CTranslate2 folder from tools/fetch_model.py, never at a model hub; the
tokenizer reference is the Hugging Face `tokenizers` library on that folder's tokenizer.json.

    tools/ref_whisper.py [--models DIR] [--out tests/data/ref/whisper] [--only PART ...]

PART is one of: clip, tokens, mel, encoder, decoder, transcripts, timestamps (default: all but
clip).
--models is the model cache (default $RILL_CACHE/models, i.e. ~/.cache/rill/models). What is
written, and the format of every file, is tests/data/ref/whisper/README.md.

Inputs. Every clip is 16 kHz mono 16-bit PCM WAV, read here as int16 / 32768 in float32 (what
faster-whisper's decode_audio gives for such a file, without going through a resampler), and the
C tests read it the same way:
  birch     tests/data/audio/birch_canoe_espeak.wav, committed (85 KB); `--only clip` remakes it
            with espeak-ng (ESPEAK below; version recorded in index.json), resampled from
            espeak-ng's 22,050 Hz to 16 kHz by PyAV (libswresample) and rounded to int16. The
            committed file is the input; a remake may differ with another espeak-ng.
  lv0880    LibriVox clip 0880 of Debian's pocketsphinx-testdata (read from /usr/share, not
            copied), the CI clip with birch
  lv0870 lv0890 lv0920 lv0930  the other four: transcripts only, for bench/
  lvall     no file: the five LibriVox clips back to back, each followed by 2 s of zero samples
            (32.7 s: two windows; the timestamps part only)
  synth, synth_short  no file: integer noise under a ramp, 12,345 and 30 samples (synth_samples();
            tests/test_whisper_mel.c computes the same integers), for the mel front end's edges
The oracle runs CTranslate2 on the CPU, compute_type float32, 2 threads.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRIVOX = '/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-%s.wav'
BIRCH = os.path.join(ROOT, 'tests', 'data', 'audio', 'birch_canoe_espeak.wav')
ESPEAK = ['espeak-ng', '-v', 'en-us', '-s', '150', 'The birch canoe slid on the smooth planks.']
CI_CLIPS = ['birch', 'lv0880']
BENCH_CLIPS = ['lv0870', 'lv0880', 'lv0890', 'lv0920', 'lv0930']
SYNTH = {'synth': 12345, 'synth_short': 30}
LVALL_GAP = 32000   # lvall: the five LibriVox clips in order, each followed by 2 s of zeros (32.7 s)
THREADS = 2
# encoder rows stored in full (of 1500): the start, around the clips' ends, the padded tail
ENC_ROWS = [0, 1, 2, 3, 64, 65, 127, 128, 129, 130, 149, 150, 151, 400, 749, 750, 1200, 1498, 1499]
DEC_STEPS = 10      # decoder positions recorded (logits after each prefix of the forced sequence)
DEC_TOPK = 20       # top logits stored per position
DEC_FULL_ROWS = 2   # positions whose whole logit row is stored

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


def sha256_of(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def clip_path(name):
    return BIRCH if name == 'birch' else LIBRIVOX % name[2:]


def read_wav(path):
    """16 kHz mono int16 WAV -> float32 samples / 32768."""
    with wave.open(path, 'rb') as w:
        if (w.getnchannels(), w.getframerate(), w.getsampwidth()) != (1, 16000, 2):
            sys.exit('ref_whisper: %s is not 16 kHz mono 16-bit PCM' % path)
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype='<i2').astype(np.float32) / 32768.0


def synth_samples(n):
    """Integer noise under a rising ramp, exactly reproducible in C: x <- x * 1664525 + 1013904223
    (mod 2^32) from x = 12345; v = (x >> 16) - 32768; sample = (v * (i % 4000)) / 4000 with C's
    truncating division, as int16 / 32768."""
    x = 12345
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        v = (x >> 16) - 32768
        p = v * (i % 4000)
        q = abs(p) // 4000
        out[i] = np.float32((q if p >= 0 else -q) / 32768.0)
    return out


def samples_of(name):
    if name == 'lvall':
        gap = np.zeros(LVALL_GAP, dtype=np.float32)
        return np.concatenate([p for c in BENCH_CLIPS for p in (read_wav(clip_path(c)), gap)])
    return synth_samples(SYNTH[name]) if name in SYNTH else read_wav(clip_path(name))


def make_clip():
    from faster_whisper.audio import decode_audio
    os.makedirs(os.path.dirname(BIRCH), exist_ok=True)
    tmp = BIRCH + '.22k.wav'
    subprocess.check_call(ESPEAK + ['-w', tmp])
    pcm = decode_audio(tmp, sampling_rate=16000)
    os.unlink(tmp)
    q = np.clip(np.round(pcm * 32768.0), -32768, 32767).astype('<i2')
    with wave.open(BIRCH, 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(q.tobytes())
    print('wrote', BIRCH)


def espeak_version():
    try:
        return subprocess.check_output(['espeak-ng', '--version'], text=True).strip()
    except OSError:
        return None


def features_of(samples):
    """faster-whisper's FeatureExtractor with its defaults (80 mels, padding=160): [80, n//160+1]."""
    from faster_whisper.feature_extractor import FeatureExtractor
    return FeatureExtractor(feature_size=80)(samples)


def encoder_input(samples):
    """What WhisperModel.transcribe feeds the encoder for a clip under 30 s: the first n//160
    frames (content_frames = frames - 1), zero-padded to 3000 (audio.pad_or_trim)."""
    from faster_whisper.audio import pad_or_trim
    f = features_of(samples)
    return pad_or_trim(f[:, :f.shape[1] - 1]).astype(np.float32)


def load_ct2(models, model):
    import ctranslate2
    return ctranslate2.models.Whisper(os.path.join(models, model + '-ct2'), device='cpu',
                                      compute_type='float32', intra_threads=THREADS)


def write_f32(out, name, array):
    np.ascontiguousarray(array, dtype='<f4').tofile(os.path.join(out, name))
    return name


def write_mel(out, index):
    entries = {}
    for name in CI_CLIPS + list(SYNTH):
        x = samples_of(name)
        f = features_of(x)
        entries[name] = {'n_samples': int(x.shape[0]), 'frames': int(f.shape[1]),
                         'file': write_f32(out, 'mel_%s.f32' % name, f),
                         'max': float(f.max()), 'min': float(f.min())}
        if name not in SYNTH:
            entries[name]['wav'] = os.path.relpath(clip_path(name), ROOT) \
                if name == 'birch' else clip_path(name)
            entries[name]['wav_sha256'] = sha256_of(clip_path(name))
    index['mel'] = entries
    print('wrote mel_*.f32')


def write_encoder(models, out, index):
    import ctranslate2
    m = load_ct2(models, 'whisper-tiny.en')
    entries = {}
    for name in CI_CLIPS:
        x = encoder_input(samples_of(name))
        e = np.array(m.encode(ctranslate2.StorageView.from_array(x[None]), to_cpu=True))[0]
        e64 = e.astype(np.float64)
        stats = np.stack([e64.sum(axis=1), (e64 * e64).sum(axis=1)], axis=1)
        entries[name] = {'model': 'whisper-tiny.en', 'shape': list(e.shape), 'rows': ENC_ROWS,
                         'rows_file': write_f32(out, 'enc_%s_rows.f32' % name, e[ENC_ROWS]),
                         'stats_file': write_f32(out, 'enc_%s_stats.f32' % name, stats),
                         'max_abs': float(np.abs(e).max()), 'rms': float(np.sqrt((e64 ** 2).mean()))}
    index['encoder'] = entries
    print('wrote enc_*.f32')


def greedy_ids(model, encoded, prompt):
    r = model.generate(encoded, [prompt], beam_size=1, max_length=448, suppress_blank=True,
                       suppress_tokens=[-1])
    return r[0].sequences_ids[0]


def write_decoder(models, out, index):
    """Logits of the decoder at DEC_STEPS positions along the clip's greedy transcript: one
    greedy generate() from the prompt faster-whisper uses without timestamps (sot, then
    notimestamps for .en) with suppression off (suppress_tokens=[], suppress_blank=False), so
    the rows are the raw logits; with return_logits_vocab, row j is the decoder's output at
    position pos = j + 1 (position 0 is sot), i.e. for the token after sequence[0..pos]. The
    sequence must be the greedy transcript with faster-whisper's suppression on (checked: the
    suppressed tokens never win on these clips), so the rows are the logits of a fixed, known
    token sequence. (Forcing the transcript as a longer prompt gives the same rows bit for
    bit: CTranslate2 forces prompt tokens after the sot sequence and returns their logits.)"""
    import ctranslate2
    m = load_ct2(models, 'whisper-tiny.en')
    entries = {}
    for name in CI_CLIPS:
        x = encoder_input(samples_of(name))
        enc = m.encode(ctranslate2.StorageView.from_array(x[None]), to_cpu=True)
        prompt = [50257, 50362]
        r = m.generate(enc, [prompt], beam_size=1, max_length=448, return_logits_vocab=True,
                       suppress_tokens=[], suppress_blank=False)
        seq = prompt + r[0].sequences_ids[0]
        if seq != prompt + greedy_ids(m, enc, prompt):
            sys.exit('ref_whisper: %s: greedy path differs without suppression' % name)
        rows = [np.array(v, dtype=np.float32) for v in r[0].logits[0][:DEC_STEPS]]
        if len(rows) != DEC_STEPS:
            sys.exit('ref_whisper: %s: %d logit rows, need %d' % (name, len(rows), DEC_STEPS))
        top = []
        for j, row in enumerate(rows):
            order = np.argsort(-row, kind='stable')[:DEC_TOPK]
            top.append({'pos': j + 1, 'next': seq[j + 2] if j + 2 < len(seq) else None,
                        'ids': [int(i) for i in order],
                        'logits': [float(row[i]) for i in order],
                        'logsumexp': float(np.logaddexp.reduce(row.astype(np.float64)))})
        entries[name] = {'model': 'whisper-tiny.en', 'sequence': seq, 'steps': top,
                         'full_file': write_f32(out, 'dec_%s_full.f32' % name,
                                                np.stack(rows[:DEC_FULL_ROWS])),
                         'full_positions': list(range(1, DEC_FULL_ROWS + 1))}
    index['decoder'] = entries
    print('wrote dec_*.f32')


def write_transcripts(models, out, index):
    """faster-whisper's greedy transcripts: beam 1, temperature 0, no VAD, without timestamps,
    language en, its defaults otherwise (suppress_tokens [-1], suppress_blank, condition on
    previous text). Also checks that its suppression list is the one the GGUF carries."""
    import tokenizers
    from faster_whisper import WhisperModel
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens
    rows = ['# model\tclip\tids\ttext_hex']
    runs = [('whisper-tiny.en', c) for c in sorted(set(CI_CLIPS + BENCH_CLIPS))]
    if os.path.isdir(os.path.join(models, 'whisper-base-ct2')):
        runs += [('whisper-base', c) for c in BENCH_CLIPS]
    loaded = {}
    for model, clip in runs:
        folder = os.path.join(models, model + '-ct2')
        if model not in loaded:
            loaded[model] = WhisperModel(folder, device='cpu', compute_type='float32',
                                         cpu_threads=THREADS, local_files_only=True)
            hf = tokenizers.Tokenizer.from_file(os.path.join(folder, 'tokenizer.json'))
            tk = Tokenizer(hf, loaded[model].model.is_multilingual, task='transcribe',
                           language='en')
            with open(os.path.join(folder, 'config.json')) as f:
                cfg = json.load(f)
            if list(get_suppressed_tokens(tk, [-1])) != sorted(cfg['suppress_ids']):
                sys.exit('ref_whisper: faster-whisper suppresses other tokens than config.json')
        segments, _ = loaded[model].transcribe(
            samples_of(clip), language='en', task='transcribe', beam_size=1, temperature=0.0,
            vad_filter=False, without_timestamps=True)
        segments = list(segments)
        ids = [t for s in segments for t in s.tokens]
        text = ''.join(s.text for s in segments)
        rows.append('%s\t%s\t%s\t%s' % (model, clip, ','.join(map(str, ids)),
                                       text.encode().hex()))
        print('%s %s: %s' % (model, clip, text))
    with open(os.path.join(out, 'transcripts.tsv'), 'w') as f:
        f.write('\n'.join(rows) + '\n')
    index['transcripts'] = {'clips': {c: clip_path(c) for c in sorted(set(CI_CLIPS + BENCH_CLIPS))}}


def write_timestamps(models, out, index):
    """timestamps.tsv: decoding WITH timestamps, as faster-whisper does it (beam 1, temperature
    0 so no fallback, no VAD, language en, condition_on_previous_text False, max_initial_timestamp
    1.0 s, its default suppression). Two kinds of rows per model and clip:
      W  the raw ids of the first window's decode (CTranslate2 generate from the sot sequence,
         without <|notimestamps|>, faster-whisper's options, max_initial_timestamp_index 50):
         text and timestamp tokens, eot excluded, and the no-speech probability;
      S  every segment transcribe() yields: the window's seek (mel frames), start and end in ms
         (rounded from faster-whisper's seconds), the segment's ids (timestamps included), and
         its text (hex).
    The first window's ids must equal faster-whisper's own first generate (checked here: the S
    rows of seek 0 are a split of the W ids)."""
    import ctranslate2
    from faster_whisper import WhisperModel
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens
    rows = ['# W\tmodel\tclip\twindow ids\tno_speech_prob',
            '# S\tmodel\tclip\tseek frames\tstart ms\tend ms\tsegment ids\ttext_hex']
    runs = [('whisper-tiny.en', c) for c in sorted(set(CI_CLIPS + BENCH_CLIPS)) + ['lvall']]
    if os.path.isdir(os.path.join(models, 'whisper-base-ct2')):
        runs += [('whisper-base', c) for c in BENCH_CLIPS + ['lvall']]
    loaded = {}
    for model, clip in runs:
        folder = os.path.join(models, model + '-ct2')
        if model not in loaded:
            fw = WhisperModel(folder, device='cpu', compute_type='float32', cpu_threads=THREADS,
                              local_files_only=True)
            tk = Tokenizer(fw.hf_tokenizer, fw.model.is_multilingual, task='transcribe',
                           language='en')
            loaded[model] = (fw, tk, list(get_suppressed_tokens(tk, [-1])))
        fw, tk, suppress = loaded[model]
        x = samples_of(clip)
        inp = encoder_input(x) if x.shape[0] <= 480000 else \
            features_of(x)[:, :3000].astype(np.float32)
        enc = fw.model.encode(ctranslate2.StorageView.from_array(inp[None]))
        r = fw.model.generate(enc, [list(tk.sot_sequence)], beam_size=1, max_length=448,
                              return_scores=True, return_no_speech_prob=True,
                              suppress_blank=True, suppress_tokens=suppress,
                              max_initial_timestamp_index=50)[0]
        ids = r.sequences_ids[0]
        rows.append('W\t%s\t%s\t%s\t%.6g' % (model, clip, ','.join(map(str, ids)),
                                              r.no_speech_prob))
        segments, _ = fw.transcribe(x, language='en', task='transcribe', beam_size=1,
                                    temperature=0.0, vad_filter=False, without_timestamps=False,
                                    condition_on_previous_text=False, max_initial_timestamp=1.0)
        first = []
        for s in segments:
            rows.append('S\t%s\t%s\t%d\t%d\t%d\t%s\t%s' % (
                model, clip, s.seek, round(s.start * 1000), round(s.end * 1000),
                ','.join(map(str, s.tokens)), s.text.encode().hex()))
            if s.seek == 0:
                first += s.tokens
            print('%s %s [%d %.2f-%.2f]%s' % (model, clip, s.seek, s.start, s.end, s.text))
        if first != ids[:len(first)]:
            sys.exit('ref_whisper: %s %s: the first window\'s segments are not a prefix of its '
                     'generate' % (model, clip))
    with open(os.path.join(out, 'timestamps.tsv'), 'w') as f:
        f.write('\n'.join(rows) + '\n')
    print('wrote timestamps.tsv')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--models', default=default_cache())
    ap.add_argument('--out', default=os.path.join(ROOT, 'tests', 'data', 'ref', 'whisper'))
    ap.add_argument('--only', nargs='*',
                    choices=['clip', 'tokens', 'mel', 'encoder', 'decoder', 'transcripts',
                             'timestamps'])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = args.only or ['tokens', 'mel', 'encoder', 'decoder', 'transcripts', 'timestamps']
    index_path = os.path.join(args.out, 'index.json')
    index = {}
    if os.path.isfile(index_path):
        with open(index_path) as f:
            index = json.load(f)
    if 'clip' in parts:
        make_clip()
    import ctranslate2
    import faster_whisper
    index['versions'] = {'faster_whisper': faster_whisper.__version__,
                         'ctranslate2': ctranslate2.__version__, 'numpy': np.__version__,
                         'espeak_ng': espeak_version(), 'espeak_command': ESPEAK,
                         'compute_type': 'float32', 'threads': THREADS}
    if 'tokens' in parts:
        write_tokens(args.models, args.out)
    if 'mel' in parts:
        write_filters(args.out)
        write_mel(args.out, index)
    if 'encoder' in parts:
        write_encoder(args.models, args.out, index)
    if 'decoder' in parts:
        write_decoder(args.models, args.out, index)
    if 'transcripts' in parts:
        write_transcripts(args.models, args.out, index)
    if 'timestamps' in parts:
        write_timestamps(args.models, args.out, index)
    with open(index_path, 'w') as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write('\n')


if __name__ == '__main__':
    main()
