#!/usr/bin/env python3
"""Speech evaluation of `rill transcribe` beside faster-whisper and pocketsphinx (issue 17 item 5).

    .venv/bin/python bench/transcribe_eval.py --rill build/cli/rill [--models tiny.en,base]
        [--sets librivox,bible] [--verses 6] [--out DIR] [--small] [--check]

Not a test (the ctest bench_transcribe_eval_small, tests/cli.cmake, runs --small). Per model
and clip set it reports:

- WER against the human reference (LibriVox: the `transcription` file of pocketsphinx-testdata;
  Bible: the World English Bible text that espeak-ng spoke, tools/synth_verses.py) of rill
  offline (`rill transcribe --offline`), rill streaming (`rill transcribe`, a re-decode per
  second), faster-whisper offline, faster-whisper streaming and pocketsphinx; and per clip the
  word edits of rill's two transcripts against faster-whisper's offline one.
  Normalisation: lower-case, keep a-z, 0-9 and ', everything else a space; word edit distance
  and WER by jiwer (corpus WER: all edits over all reference words).
- Real-time factor (wall time / audio time over the set). rill: its --json `rtf` (one process
  per clip, model load included). faster-whisper (1.2.1 on the same CTranslate2 weights: beam 1,
  temperature 0, language en, no VAD, float32, without timestamps, 2 CPU threads): model loaded
  once, and that plus one load per clip. Its streaming figure runs rill's loop with it: every
  second of audio, the audio so far is transcribed again (one 30 s window: every clip here is
  shorter) and the longest word prefix on which two consecutive hypotheses agree is committed;
  the last hypothesis commits the rest. pocketsphinx (Debian's pocketsphinx_continuous 0.8,
  en-us model, one thread): process wall time (model load included), and its own decode time
  (the fwdtree + fwdflat + bestpath "TOTAL ... wall" lines it logs).
- Commit delay: for each word of a streamed transcript that matches a word of the reference
  alignment (faster-whisper's word_timestamps=True on the same audio, the reference aligner),
  the audio time consumed when the word first appeared in the committed text (rill:
  `audio_s` of its --json lines; independent of --pace and of wall time) minus the word's end in
  the audio. Median and p90 over all matched words of the set.

The engines run clip by clip in turn (rill offline, faster-whisper, pocketsphinx, rill
streaming, faster-whisper streaming), so a change in the machine's load falls on all of them;
the 1-minute load average is sampled before each clip.

--small (what CI runs): tiny.en, the LibriVox clips 0880 and 0930, rill and pocketsphinx only;
faster-whisper's transcripts and word end times come from tests/data/ref/whisper/ (recorded with
--record-ref) instead of a live faster-whisper. --check exits 1 when a rill transcript is more
than one word from faster-whisper's on a clip. Writes DIR/transcribe_eval.json and
DIR/transcribe_eval.md (DIR defaults to build/transcribe_eval) and prints the Markdown.
"""
import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRIVOX = '/usr/share/pocketsphinx/test/data/librivox'
CACHE = os.environ.get('RILL_CACHE', os.path.expanduser('~/.cache/rill'))
MODELS = {  # name: (GGUF for rill, CTranslate2 folder for faster-whisper)
    'tiny.en': (os.path.join(SRC, 'models', 'whisper-tiny.en.gguf'),
                os.path.join(CACHE, 'models', 'whisper-tiny.en-ct2')),
    'base': (os.path.join(SRC, 'models', 'whisper-base.gguf'),
             os.path.join(CACHE, 'models', 'whisper-base-ct2')),
}
REF_DIR = os.path.join(SRC, 'tests', 'data', 'ref', 'whisper')
SMALL_CLIPS = ['lv0880', 'lv0930']
THREADS = 2
STEP_S = 1.0  # rill transcribe's default --step-ms


def words(text):
    """The issue's normalisation, as a word list."""
    return re.sub(r"[^a-z0-9']+", ' ', text.lower()).split()


def loadavg():
    return round(os.getloadavg()[0], 2)


# ---- clip sets ----------------------------------------------------------------------------------

def librivox_clips(only=None):
    """[(name, wav, reference)] of pocketsphinx-testdata's LibriVox clips."""
    refs = {}
    with open(os.path.join(LIBRIVOX, 'transcription'), encoding='utf-8') as f:
        for line in f:
            m = re.match(r'\s*(.*?)\s*\((\S+)\)\s*$', line)
            if m:
                refs[m.group(2)] = re.sub(r'</?s>', ' ', m.group(1))
    out = []
    for wav in sorted(glob.glob(os.path.join(LIBRIVOX, '*.wav'))):
        stem = os.path.basename(wav)[:-4]
        name = 'lv' + stem.rsplit('-', 1)[1]
        if only is None or name in only:
            out.append((name, wav, refs[stem]))
    if not out:
        sys.exit(f'transcribe_eval: no LibriVox clips in {LIBRIVOX} (scripts/setup.sh)')
    return out


def bible_clips(n):
    sys.path.insert(0, os.path.join(SRC, 'tools'))
    import synth_verses
    m = synth_verses.synthesize('dev', n)
    return [(v['ref'].replace(' ', '_'), v['wav'], v['text']) for v in m['verses']]


# ---- engines ------------------------------------------------------------------------------------

def rill_run(rill, gguf, wav, offline):
    args = [rill, 'transcribe', '--json', '--threads', str(THREADS), '--asr', gguf,
            '--language', 'en', *(['--offline'] if offline else []), wav]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f'transcribe_eval: {" ".join(args)}: exit {p.returncode}\n{p.stderr}')
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    final = lines[-1]
    return final, lines[:-1]


def rill_commits(changes, final):
    """Audio time at which each word of the final transcript first appeared in the committed
    text (rill commits whole words only: scheduler/rill_transcript.h); words committed only by
    the end get the final audio_s."""
    fw = words(final['text'])
    at = [None] * len(fw)
    for c in changes:
        for i in range(min(len(words(c['committed'])), len(fw))):
            if at[i] is None:
                at[i] = c['audio_s']
    return [final['audio_s'] if a is None else a for a in at]


class FasterWhisper:
    def __init__(self, folder):
        from faster_whisper import WhisperModel
        t0 = time.monotonic()
        self.m = WhisperModel(folder, device='cpu', compute_type='float32',
                              cpu_threads=THREADS, local_files_only=True)
        self.load_s = time.monotonic() - t0

    def text(self, audio, word_timestamps=False):
        segs, info = self.m.transcribe(audio, language='en', task='transcribe', beam_size=1,
                                       temperature=0.0, vad_filter=False,
                                       without_timestamps=True,
                                       word_timestamps=word_timestamps)
        segs = list(segs)
        return ''.join(s.text for s in segs), segs

    def offline(self, wav):
        from faster_whisper.audio import decode_audio
        t0 = time.monotonic()
        text, _ = self.text(wav)
        wall = time.monotonic() - t0
        return text, wall, len(decode_audio(wav)) / 16000

    def word_ends(self, wav):
        """The reference alignment: [(normalised word, end s)]; a word that normalises to
        several (ill-disposed) gives each the whole word's end."""
        _, segs = self.text(wav, word_timestamps=True)
        return [(w, round(x.end, 3)) for s in segs for x in s.words for w in words(x.word)]

    def streaming(self, wav):
        """rill's loop with faster-whisper: re-transcribe the audio so far every STEP_S,
        local agreement of two consecutive hypotheses commits."""
        from faster_whisper.audio import decode_audio
        x = decode_audio(wav)
        dur = len(x) / 16000
        if dur >= 30:
            raise ValueError(f'{wav}: {dur:.1f} s, the streaming loop here needs under 30 s')
        steps = [STEP_S * k for k in range(1, int(dur / STEP_S) + 1)]
        if not steps or steps[-1] < dur:
            steps.append(dur)
        committed, at, prev, wall = [], [], None, 0.0
        for t in steps:
            t0 = time.monotonic()
            hyp = words(self.text(x[:int(t * 16000)])[0])
            wall += time.monotonic() - t0
            if t == steps[-1]:
                agree = hyp
            else:
                agree = []
                for a, b in zip(prev or [], hyp):
                    if a != b:
                        break
                    agree.append(a)
            if len(agree) > len(committed) and agree[:len(committed)] == committed:
                at += [t] * (len(agree) - len(committed))
                committed = list(agree)
            prev = hyp
        return ' '.join(committed), wall, dur, at


class Recorded:
    """faster-whisper's transcripts and word ends as tests/data/ref/whisper/ holds them."""

    def __init__(self, model, ref_dir):
        self.model = 'whisper-' + model
        self.texts, self.ends = {}, {}
        with open(os.path.join(ref_dir, 'transcripts.tsv'), encoding='utf-8') as f:
            for line in f:
                c = line.rstrip('\n').split('\t')
                if c[0] == self.model:
                    self.texts[c[1]] = bytes.fromhex(c[3]).decode()
        with open(os.path.join(ref_dir, 'word_ends.tsv'), encoding='utf-8') as f:
            for line in f:
                c = line.rstrip('\n').split('\t')
                if c[0] == self.model:
                    self.ends.setdefault(c[1], []).append((c[2], float(c[3])))


def pocketsphinx(wav):
    exe = shutil.which('pocketsphinx_continuous')
    t0 = time.monotonic()
    p = subprocess.run([exe, '-infile', wav], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f'transcribe_eval: pocketsphinx_continuous -infile {wav}: exit {p.returncode}')
    decode = sum(float(m) for m in
                 re.findall(r'TOTAL (?:fwdtree|fwdflat|bestpath) ([0-9.]+) wall', p.stderr))
    return p.stdout.strip(), wall, decode


# ---- measures -----------------------------------------------------------------------------------

def edits(ref, hyp):
    import jiwer
    r, h = ' '.join(words(ref)), ' '.join(words(hyp))
    if not r:
        return len(h.split())
    o = jiwer.process_words(r, h)
    return o.substitutions + o.deletions + o.insertions


def wer(refs, hyps):
    return sum(edits(r, h) for r, h in zip(refs, hyps)) / sum(len(words(r)) for r in refs)


def delays(ends, hyp_words, at):
    """Commit time minus word end, for each hypothesis word that the alignment pairs with an
    equal reference word."""
    import jiwer
    ref = [w for w, _ in ends]
    if not ref or not hyp_words:
        return []
    o = jiwer.process_words(' '.join(ref), ' '.join(hyp_words))
    out = []
    for ch in o.alignments[0]:
        if ch.type == 'equal':
            for k in range(ch.ref_end_idx - ch.ref_start_idx):
                out.append(at[ch.hyp_start_idx + k] - ends[ch.ref_start_idx + k][1])
    return out


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = math.floor(k)
    return round(xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo), 3)


# ---- the run ------------------------------------------------------------------------------------

def evaluate(rill, model, set_name, clips, fw, ps, fw_stream, log):
    gguf = MODELS[model][0]
    rows, loads = [], []
    for name, wav, ref in clips:
        loads.append(loadavg())
        r = {'clip': name, 'reference': ref}
        off, _ = rill_run(rill, gguf, wav, True)
        r['rill_offline'] = {'text': off['text'], 'wall_s': off['wall_s'],
                             'audio_s': off['audio_s']}
        if isinstance(fw, Recorded):
            if name not in fw.texts or name not in fw.ends:
                sys.exit(f'transcribe_eval: no recorded faster-whisper transcript or word ends '
                         f'of {fw.model} {name}')
            r['fw_offline'] = {'text': fw.texts[name]}
            r['fw_word_ends'] = fw.ends[name]
        else:
            text, wall, dur = fw.offline(wav)
            r['fw_offline'] = {'text': text, 'wall_s': round(wall, 3), 'audio_s': round(dur, 3)}
            r['fw_word_ends'] = fw.word_ends(wav)
        if ps:
            text, wall, dec = pocketsphinx(wav)
            r['pocketsphinx'] = {'text': text, 'wall_s': round(wall, 3),
                                 'decode_s': round(dec, 3)}
        st, changes = rill_run(rill, gguf, wav, False)
        at = rill_commits(changes, st)
        r['rill_streaming'] = {'text': st['text'], 'wall_s': st['wall_s'],
                               'audio_s': st['audio_s'], 'commit_s': at,
                               'delays_s': [round(d, 3) for d in
                                            delays(r['fw_word_ends'], words(st['text']), at)]}
        if not isinstance(fw, Recorded) and fw_stream:
            text, wall, dur, fat = fw.streaming(wav)
            r['fw_streaming'] = {'text': text, 'wall_s': round(wall, 3), 'audio_s': round(dur, 3),
                                 'commit_s': fat,
                                 'delays_s': [round(d, 3) for d in
                                              delays(r['fw_word_ends'], words(text), fat)]}
        r['edits_vs_fw'] = {k: edits(r['fw_offline']['text'], r[k]['text'])
                            for k in ('rill_offline', 'rill_streaming')}
        rows.append(r)
        log(f'{model} {set_name} {name}: load {loads[-1]}, edits vs faster-whisper '
            f'{r["edits_vs_fw"]}')
    audio = sum(r['rill_offline']['audio_s'] for r in rows)
    refs = [r['reference'] for r in rows]
    s = {'model': model, 'set': set_name, 'clips': len(rows), 'audio_s': round(audio, 3),
         'reference_words': sum(len(words(x)) for x in refs),
         'load_1min': {'min': min(loads), 'max': max(loads)}, 'wer': {}, 'rtf': {}, 'delay_s': {},
         'max_edits_vs_fw': {k: max(r['edits_vs_fw'][k] for r in rows)
                             for k in ('rill_offline', 'rill_streaming')}}
    engines = ['rill_offline', 'rill_streaming', 'fw_offline', 'fw_streaming', 'pocketsphinx']
    for e in engines:
        if e in rows[0]:
            s['wer'][e] = round(wer(refs, [r[e]['text'] for r in rows]), 4)
    s['rtf']['rill_offline'] = round(sum(r['rill_offline']['wall_s'] for r in rows) / audio, 4)
    s['rtf']['rill_streaming'] = round(sum(r['rill_streaming']['wall_s'] for r in rows) / audio,
                                       4)
    if not isinstance(fw, Recorded):
        w = sum(r['fw_offline']['wall_s'] for r in rows)
        s['rtf']['fw_offline'] = round(w / audio, 4)
        s['rtf']['fw_offline_with_load'] = round((w + fw.load_s * len(rows)) / audio, 4)
        if fw_stream:
            s['rtf']['fw_streaming'] = round(
                sum(r['fw_streaming']['wall_s'] for r in rows) / audio, 4)
    if ps:
        s['rtf']['pocketsphinx'] = round(sum(r['pocketsphinx']['wall_s'] for r in rows) / audio, 4)
        s['rtf']['pocketsphinx_decode'] = round(
            sum(r['pocketsphinx']['decode_s'] for r in rows) / audio, 4)
    for e in ('rill_streaming', 'fw_streaming'):
        if e in rows[0]:
            d = [x for r in rows for x in r[e]['delays_s']]
            s['delay_s'][e] = {'words': len(d), 'median': pct(d, 0.5), 'p90': pct(d, 0.9)}
    return s, rows


def goals(s):
    """The issue's goals for one summary: {goal: (met, what)} (None: not measured)."""
    g = {}
    m = max(s['max_edits_vs_fw'].values())
    g['transcripts within one word of faster-whisper per clip'] = (
        m <= 1, f'most edits on a clip: offline {s["max_edits_vs_fw"]["rill_offline"]}, '
        f'streaming {s["max_edits_vs_fw"]["rill_streaming"]}')
    fw = s['rtf'].get('fw_offline')
    if fw is None:
        g['offline rtf no worse than faster-whisper'] = (None, 'faster-whisper not run')
        g['streaming rtf within 2x of faster-whisper'] = (None, 'faster-whisper not run')
    else:
        ro, rs = s['rtf']['rill_offline'], s['rtf']['rill_streaming']
        g['offline rtf no worse than faster-whisper'] = (
            ro <= fw, f'rill {ro:.3f} vs {fw:.3f} (x{ro / fw:.2f}); faster-whisper with a load '
            f'per clip {s["rtf"]["fw_offline_with_load"]:.3f}')
        g['streaming rtf within 2x of faster-whisper'] = (
            rs <= 2 * fw, f'rill streaming {rs:.3f} = x{rs / fw:.2f} faster-whisper offline; '
            + (f'x{rs / s["rtf"]["fw_streaming"]:.2f} its streaming loop'
               if 'fw_streaming' in s['rtf'] else 'its streaming loop not run'))
    return g


LABELS = {'rill_offline': 'rill --offline', 'rill_streaming': 'rill streaming',
          'fw_offline': 'faster-whisper', 'fw_offline_with_load': 'faster-whisper + load/clip',
          'fw_streaming': 'faster-whisper streaming loop', 'pocketsphinx': 'pocketsphinx',
          'pocketsphinx_decode': 'pocketsphinx decode only'}


def markdown(doc):
    v = ', '.join(f'{k} {x}' for k, x in doc['versions'].items())
    out = [f'{doc["date"]}, {doc["machine"]}, {doc["threads"]} threads ({v}); command: '
           f'`{doc["command"]}`', '']
    for s in doc['summaries']:
        out.append(f'**{s["model"]}, {s["set"]}** ({s["clips"]} clips, {s["audio_s"]:.2f} s of '
                   f'audio, {s["reference_words"]} reference words; load average '
                   f'{s["load_1min"]["min"]}-{s["load_1min"]["max"]})')
        out += ['', '| engine | WER % | rtf | commit delay median s | p90 s |',
                '|---|---|---|---|---|']
        for e in LABELS:
            if e not in s['wer'] and e not in s['rtf']:
                continue
            w = s['wer'].get(e)
            r = s['rtf'].get(e)
            d = s['delay_s'].get(e, {})
            out.append(f'| {LABELS[e]} | {"-" if w is None else f"{100 * w:.1f}"} | '
                       f'{"-" if r is None else f"{r:.3f}"} | '
                       f'{"-" if d.get("median") is None else d["median"]} | '
                       f'{"-" if d.get("p90") is None else d["p90"]} |')
        out.append('')
        for k, (met, what) in goals(s).items():
            out.append(f'- {k}: {"not measured" if met is None else "met" if met else "MISSED"}'
                       f' ({what})')
        out.append('')
    return '\n'.join(out)


def record_ref(clips):
    """Writes tests/data/ref/whisper/word_ends.tsv for tiny.en and the --small clips."""
    fw = FasterWhisper(MODELS['tiny.en'][1])
    with open(os.path.join(REF_DIR, 'word_ends.tsv'), 'w', encoding='utf-8') as f:
        f.write('# model\tclip\tword\tend_s  (faster-whisper 1.2.1 word_timestamps=True, '
                'bench/transcribe_eval.py --record-ref)\n')
        for name, wav, _ in clips:
            for w, e in fw.word_ends(wav):
                f.write(f'whisper-tiny.en\t{name}\t{w}\t{e}\n')


def write(out, doc):
    """Writes OUT/transcribe_eval.json and OUT/transcribe_eval.md; returns the Markdown."""
    os.makedirs(out, exist_ok=True)
    md = markdown(doc)
    for name, text in (('transcribe_eval.json', json.dumps(doc, indent=1)),
                       ('transcribe_eval.md', md)):
        with open(os.path.join(out, name + '.tmp'), 'w', encoding='utf-8') as f:
            f.write(text + '\n')
        os.replace(os.path.join(out, name + '.tmp'), os.path.join(out, name))
    return md


def versions(fw, ps):
    v = {'rill': subprocess.run(['git', '-C', SRC, 'describe', '--always', '--dirty'],
                                capture_output=True, text=True).stdout.strip()}
    if fw:
        import ctranslate2
        import faster_whisper
        v['faster_whisper'] = faster_whisper.__version__
        v['ctranslate2'] = ctranslate2.__version__
    if ps:
        v['pocketsphinx'] = subprocess.run(['dpkg-query', '-W', '-f', '${Version}',
                                            'pocketsphinx'],
                                           capture_output=True, text=True).stdout.strip()
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rill', default=os.path.join(SRC, 'build', 'cli', 'rill'))
    ap.add_argument('--models', default='tiny.en,base')
    ap.add_argument('--sets', default='librivox,bible')
    ap.add_argument('--verses', type=int, default=6)
    ap.add_argument('--base-gguf', help='rill\'s base GGUF (default models/whisper-base.gguf, '
                    'scripts/setup.sh --speech)')
    ap.add_argument('--out', default=os.path.join(SRC, 'build', 'transcribe_eval'))
    ap.add_argument('--small', action='store_true')
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--no-pocketsphinx', action='store_true')
    ap.add_argument('--no-fw-streaming', action='store_true',
                    help='leave out faster-whisper\'s streaming loop (the longest part)')
    ap.add_argument('--record-ref', action='store_true',
                    help='record faster-whisper\'s word ends of the --small clips into '
                    'tests/data/ref/whisper/word_ends.tsv')
    ap.add_argument('--ref-dir', default=REF_DIR,
                    help='where --small reads transcripts.tsv and word_ends.tsv')
    a = ap.parse_args()
    try:
        import jiwer  # noqa: F401
    except ImportError:
        print('SKIP: jiwer is missing from this Python: run scripts/setup.sh')
        return 77
    if a.record_ref:
        record_ref(librivox_clips(SMALL_CLIPS))
        return 0
    if a.base_gguf:
        MODELS['base'] = (a.base_gguf, MODELS['base'][1])
    models = ['tiny.en'] if a.small else a.models.split(',')
    sets = ['librivox'] if a.small else a.sets.split(',')
    for m in models:
        if m not in MODELS:
            sys.exit(f'transcribe_eval: unknown model {m!r} (tiny.en, base)')
        if not os.path.exists(MODELS[m][0]):
            if a.small:
                print(f'SKIP: {MODELS[m][0]} is missing: run scripts/setup.sh')
                return 77
            sys.exit(f'transcribe_eval: {MODELS[m][0]} is missing (scripts/setup.sh --speech, '
                     'or --base-gguf)')
    for x in sets:
        if x not in ('librivox', 'bible'):
            sys.exit(f'transcribe_eval: unknown set {x!r} (librivox, bible)')
    if a.verses < 1:
        sys.exit('transcribe_eval: --verses must be at least 1')
    if not a.small:
        try:
            import faster_whisper  # noqa: F401
        except ImportError:
            sys.exit('transcribe_eval: faster-whisper is missing (scripts/setup.sh --speech)')
    ps = not a.no_pocketsphinx and shutil.which('pocketsphinx_continuous') is not None
    if not ps and not a.no_pocketsphinx:
        print('transcribe_eval: pocketsphinx_continuous not found, that baseline left out',
              file=sys.stderr)
    doc = {'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
           'machine': f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores',
           'threads': THREADS, 'command': ' '.join(['bench/transcribe_eval.py'] + sys.argv[1:]),
           'versions': versions(not a.small, ps), 'summaries': [], 'clips': []}
    with open('/proc/cpuinfo') as f:
        m = re.search(r'model name\s*:\s*(.*)', f.read())
        if m:
            doc['machine'] = f'{m.group(1)}, {os.cpu_count()} cores'

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    for model in models:
        fw = Recorded(model, a.ref_dir) if a.small else FasterWhisper(MODELS[model][1])
        for set_name in sets:
            if set_name == 'librivox':
                clips = librivox_clips(SMALL_CLIPS if a.small else None)
            else:
                clips = bible_clips(a.verses)
            s, rows = evaluate(a.rill, model, set_name, clips, fw, ps, not a.no_fw_streaming,
                               log)
            doc['summaries'].append(s)
            doc['clips'] += [dict(r, model=model, set=set_name) for r in rows]
            md = write(a.out, doc)  # after each set, so that a long run keeps what it has
    print(md)
    if a.check:
        bad = [(c['model'], c['clip'], c['edits_vs_fw']) for c in doc['clips']
               if max(c['edits_vs_fw'].values()) > 1]
        for b in bad:
            print(f'CHECK FAILED: {b[0]} {b[1]}: word edits against faster-whisper {b[2]}')
        return 1 if bad else 0
    return 0


if __name__ == '__main__':
    sys.exit(main())
