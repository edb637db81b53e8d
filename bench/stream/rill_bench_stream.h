/*
 * rill_bench_stream.h - the stream benchmark (`rill bench stream`): question latency on live
 * market streams, K persistent sessions on the scheduler (mode "rill") against answering each
 * sampled question statelessly, re-prefilling its whole context (mode "stateless", (a)).
 * DESIGN.md section 8, "Sessions"; the figures it has produced are in docs/benchmarks.md
 * ("Streaming benchmark"); stream_internal.h describes the workload and the modes.
 *
 * A benchmark program (STYLE.md rule 27) built as the library rill_bench_stream so that the
 * `rill` command runs it as a sub-command: `rill bench stream ARGS` calls
 * rill_bench_stream_main() with argv[0] = "stream". Its options, --help and output are part of
 * INTERFACES.md ("Streams and benchmarks").
 *
 * Output. stdout: a Markdown table of TTFT percentiles per context bucket, summary lines, and
 * one machine-readable JSON line ({"bench":"stream", ...}). With --json FILE: JSON Lines, one
 * object per question and mode (mode, session, q, context, bucket, status, ttft_ms, total_ms,
 * engine_ttft_ms, ttft_compute_ms, backlog, answer ids, ...), then one summary object per mode
 * ("summary": true; ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, p99_over_p50, utilization and the
 * engine's figures for "rill", among them standing_share (refreshes' engine time over the
 * stream's wall time), standing_busy_share (over the engine's busy time) and
 * standing_deferred_interval / standing_deferred_share (refreshes the standing budget held back,
 * set with --standing-interval-ms and --standing-share); buckets[] of {le, n, ttft_p50_ms,
 * ttft_p90_ms, ttft_p99_ms}, with over_rill, the median of stateless TTFT over rill TTFT per
 * question, for "stateless"). Percentiles are core's histogram's (rill_hist.h): nearest rank,
 * reported as the upper edge of the bucket that holds it, so within 1/32 above the sample (exact
 * for the minimum and the maximum). Consistency (issue 18 item 3, --consistency acknowledged,
 * evaluated or both; stream_internal.h): each rill question line says which it waited for
 * ("consistency") beside the data version it saw; the rill summary says the run's
 * ("consistency": one of the three) and, for both, "by_consistency" {acknowledged, evaluated}
 * of {questions, failed, ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, behind_p50, behind_p99,
 * behind_any (chunks acknowledged before the question that its answer did not see), scored,
 * correct, accuracy}; stdout gets a line per consistency. With --export FILE: the exact stream as
 * JSON, for bench/stream_llama.py. Progress and errors go to stderr.
 *
 * Accuracy (issue 23). Every answer is checked against its session's market truth
 * (ingest/rill_market_truth.h) at the chunks it was computed on (rill: the whole chunks within
 * its resident tokens; stateless: its request's): per question line truth_kind, chunks_seen,
 * data_version (rill: the version the engine reported), answer_text, expected (null: nothing to
 * know yet) and correct
 * (true/false/null: unscored); per summary scored, correct, accuracy (correct / scored, null
 * when none) and accuracy_by_kind ({kind: {n, scored, correct, accuracy}}); the rill summary
 * also standing_kind, standing_answers_checked, standing_scored, standing_correct and
 * standing_accuracy (every standing answer, at the version it was computed on). stdout gets a
 * table of accuracy per question kind beside its TTFT p50, an accuracy line, and "accuracy" in
 * the machine-readable line (-1 when none was scored).
 */
#ifndef RILL_BENCH_STREAM_H
#define RILL_BENCH_STREAM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Parses argv[1..argc) (argv[0] is the sub-command's name, e.g. "stream"), builds the stream,
 * runs both modes and reports; blocks until done (seconds to hours, with the options). Loads
 * the model (--model, or the default model the `rill` command finds), starts one feeder thread
 * per session and the scheduler's engine thread, and frees everything before it returns.
 * Returns the process exit code: 0 success (also after --help, printed to stdout), 1 failure
 * (message on stderr; also when any question failed), 2 usage error (message on stderr).
 * Thread safety: call from one thread at a time (the program's main thread); it installs no
 * signal handler and leaves the rill_log callback as the caller set it. */
int rill_bench_stream_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* RILL_BENCH_STREAM_H */
