/*
 * rill_ingest.h - the ingest module: stream adapters that turn raw input into what a session
 * ingests (../shared/DESIGN.md section 2). Include this, or the part's own header; each part's
 * header is its manual.
 *
 *   rill_market.h       msgpack and CSV ticks, the symbol table and tick/bar lines, the rate
 *                       governor, the synthetic market
 *   rill_market_truth.h the true answers to the fixed market questions, the check of answers
 *   rill_text_ingest.h  raw text chunks to clean UTF-8 text (boundary-safe)
 *   rill_audio.h        audio files, ingest.audio packets, live capture to 16 kHz mono; voice
 *                       activity
 */
#ifndef RILL_INGEST_H
#define RILL_INGEST_H

#include "rill_audio.h"
#include "rill_market.h"
#include "rill_market_prompt.h"
#include "rill_market_truth.h"
#include "rill_text_ingest.h"

#endif /* RILL_INGEST_H */
