/*
 * rill_backend.h - the compute backend: the ops a llama/qwen2 forward pass needs, written once
 * against this interface and run by any backend.
 *
 * Backends are a registry (rill_backend_registry_*): a static table of rows {name, kind, numerics
 * class, available(), new()} that rill_backend_new() picks from by params.kind. Rows in this
 * build:
 *   "ref"  RILL_BACKEND_REF  plain C, one thread, simple loops: the oracle that defines "correct".
 *   "cpu"  RILL_BACKEND_CPU  the fast CPU backend: AVX-512 / AVX2+FMA+F16C / portable scalar
 *                            kernels chosen at run time (params.cpu.simd, RILL_SIMD), threaded
 *                            over a rill_pool_t.
 *   Both are host backends with one device (index 0). RILL_BACKEND_CUDA is a reserved kind with
 *   no row: rill_backend_new() answers RILL_EUNSUPPORTED for it until kernels/cuda/ adds its row
 *   (name "cuda", one device per GPU, class RILL_NUMERICS_TOLERANCE). An instance's own name
 *   (rill_backend_name) says which kernels run: "ref", "cpu-avx512", "cpu-avx2", "cpu-scalar".
 *
 * Numerics classes (rill_numerics_t: every registry row states one; rill_backend_numerics()
 * answers for an instance)
 *   RILL_NUMERICS_EXACT: bit-exact to llama.cpp's portable CPU build at the reference commit
 *     (llama.cpp 0c1e57098, AVX2 + FMA + F16C, GCC). A backend of this class promises, for the
 *     same inputs: every op below gives the reference backend's bits (NaN where the reference
 *     has NaN), whatever the batch's other tokens, the thread count or the task split, for both
 *     attention kernels; and the reference's bits are llama.cpp's for every op except attention
 *     with RILL_ATTN_FLASH (see Numerics below, which also names the one unreproduced corner of
 *     llama.cpp's Q8_K quantizer; tests/test_forward.c holds whole forward passes to llama.cpp's
 *     logits bit for bit, F32 cache, flash off). Rows: "ref", and "cpu" at every
 *     SIMD level (cpu-scalar, cpu-avx2, and cpu-avx512, whose AVX-512 flash kernel gives the
 *     AVX2 kernel's bits).
 *     The flash kernel within this class: bit-exact across these backends to rill's own flash
 *     definition (Numerics, RILL_ATTN_FLASH), which is not llama.cpp's flash path; relative to
 *     llama.cpp it is within the tolerances stated there. So its row stays EXACT (its flash ops
 *     give the reference's flash bits), while an instance created with RILL_ATTN_FLASH reports
 *     RILL_NUMERICS_TOLERANCE from rill_backend_numerics() (its forward passes are within
 *     tolerances of llama.cpp's, not equal to them).
 *   RILL_NUMERICS_TOLERANCE: within stated tolerances. Each op's result lies within the
 *     tolerance that tests/test_kernels.c's backend-ops table states for that op, type and shape,
 *     relative to the reference backend on the same inputs (for matmul, of sum |w x|; otherwise
 *     of max |output|, absolute for attention, whose V is in [-1, 1] there); what has no rounding
 *     of its own is held to 0 in every class (lookups of float rows, additions, KV stores, page
 *     copies, arg-max of given rows). No promise of bits, nor of a result independent of the
 *     batch or the thread count. For: any device backend, and (for whole forward passes,
 *     relative to llama.cpp) an instance created with RILL_ATTN_FLASH.
 *   The backend-ops test runs every available row (every SIMD level of "cpu", 1 and 2 threads,
 *   both attention kernels) against "ref" with its row's class: tolerance 0 for EXACT.
 *
 * Memory model (what lets a GPU backend follow without touching the forward pass)
 *   - Activations, scratch tensors and KV pools are allocated by the backend
 *     (rill_backend_alloc) and live in the backend's memory space: host memory for the CPU
 *     backends, device memory later. The caller may compute addresses inside an allocation
 *     ((char *)p + offset) but never dereferences them; data crosses with rill_backend_copy_in /
 *     rill_backend_copy_out (host <-> backend) and rill_backend_copy (backend <-> backend).
 *     Every float * / void * argument of an op below is such a backend pointer unless it is
 *     marked "host".
 *   - Weights are prepared once with rill_weight_new() from host memory (typically a tensor in
 *     the mmapped GGUF file). The CPU backends keep a pointer to it (zero copy, no repacking:
 *     the mapping must outlive the weight); a GPU backend uploads it.
 *   - Per-step metadata (positions, KV slots, page tables) goes in with rill_backend_set_batch(),
 *     once per forward pass, from host memory.
 *
 * Tensor shapes (row-major, the last index contiguous), letters used throughout:
 *   T tokens in the batch, E = n_in (matmul input width), O = n_out, H heads of the query,
 *   Hkv KV heads, D head_dim, P positions per KV page.
 *   activations x: (T, E) f32; matmul output y: (T, O) f32; q: (T, H, D); k, v: (T, Hkv, D).
 *
 * The batch: T tokens that may belong to different sequences at different positions
 *   rill_batch_t.tok[t] = { seq, pos, slot, n_kv }: token t belongs to sequence `seq` (an index
 *   into rill_batch_t.seq, each entry a page table); `pos` is its position for RoPE; its K and V
 *   are stored at KV slot `slot` of its sequence; it attends to slots [0, n_kv) of its sequence
 *   (causal: n_kv = slot + 1, counting earlier tokens of the same batch that kv_store wrote).
 *   Slot s of a sequence lives in page pages[s / P], row s % P. A contiguous cache is the identity
 *   page table (pages[i] = i). pos and slot are separate so that a session may re-base positions
 *   (sliding window) without moving its pages.
 *
 * Paged KV pool (one per layer; the same page table serves every layer when the pools are
 * allocated alike): n_pages pages of rill_kv_page_bytes() bytes each. Page layout:
 *   K: (Hkv, P, one K row) then V: (Hkv, P, one V row). A row is D values of the part's type
 *   (kv->k_dtype, kv->v_dtype: F16, llama.cpp's default cache type, F32, or the ggml blocks
 *   Q8_0 (34 bytes per 32 values: f16 scale, 32 int8) and Q4_0 (18 bytes: f16 scale, 16 bytes
 *   of nibbles), D / 32 blocks). K is stored after RoPE.
 *
 * Numerics (what "matches llama.cpp" means here)
 *   With the default attention kernel (RILL_ATTN_EXACT) the backends of the exact class compute
 *   what llama.cpp's CPU backend computes (llama.cpp 0c1e57098, the portable AVX2 + FMA + F16C
 *   build, GCC: every rounding, every FMA it contracted), bit for bit: the reference backend
 *   states it in plain loops (kernels/ggml_ref.c), the fast backend's AVX-512, AVX2 and scalar
 *   kernels are tested to give the reference's bits (the backend-ops test), and
 * tests/test_forward.c holds the forward pass to llama.cpp's logits exactly (KV cache F32, flash
 * attention off). RILL_ATTN_FLASH (below) trades that for one pass over the cache; every other op
 * is the same either way.
 *   - matmul quantizes each input row once to the weight type's vec_dot type (rill_quant.h) as
 *     llama.cpp does, then forms each dot product as the kernel llama.cpp picks would: vec_dot
 *     (one token; K-quants below 8 tokens), tinyBLAS (F32/F16/BF16 from 2 tokens when E % 8 ==
 *     0 and O % 4 == 0), the tiled K-quant kernel (Q4_K/Q5_K/Q6_K from 8 tokens), the repacked
 *     q4_0_8x8 / q4_K_8x8 kernels (Q4_0/Q4_K with O % 8 == 0, except the weight marked as the
 *     embedding; q4_K's gemm for the tokens in whole groups of 4, its gemv for the rest). So a
 *     token's logits depend on the batch it is in, as llama.cpp's do (never on threads or
 *     tiles). Not reproduced: llama.cpp's q8_K 4-row quantizer picks the sign of a block's
 *     largest value differently when +max and -max both occur (never seen in practice).
 *   - RMSNorm: the f32 squares summed in double in order, scale = 1/sqrtf((float)(sum/n) + eps),
 *     y = (x * scale) * w.
 *   - SwiGLU: ggml_v_silu (g / (1 + ggml_v_expf(0 - g)), ggml's own exp, ~1.5 ulp) times u;
 *     libm's expf for the last n % 8 values of a call (ggml_silu_f32: llama.cpp does this per
 *     row of n_ff, rill per call, the same for every n_ff that is a multiple of 8).
 *   - RoPE angles as ggml builds them (theta_i = pos * base^(-2i/n_rot) by repeated f32
 *     multiplication, libm cosf/sinf), pairs rotated as fma(x0, c, -(x1 s)), fma(x0, s, x1 c);
 *     mode NORM rotates adjacent pairs (x[2i], x[2i+1]) and is what llama.cpp uses for
 *     LLM_ARCH_LLAMA; mode NEOX rotates (x[i], x[i + n_rot/2]) and is what it uses for
 *     LLM_ARCH_QWEN2.
 *   - attention, RILL_ATTN_EXACT: llama.cpp's non-flash path per (token, head): scores q.K_j
 *     with ggml_vec_dot_f32's accumulation order (F16 pool: q rounded to f16, ggml_vec_dot_f16),
 *     times 1/sqrt(D); softmax as soft_max_ext (max, ggml_v_expf of w - max, each 8 slots'
 *     sum added to a double, weights times (float)(1/sum); F16 pool: weights rounded to f16);
 *     the weighted sum of V in tinyBLAS's lane order for a batch of 2+ tokens, in
 *     ggml_vec_dot_f32's for one. Two passes over the slots (no online softmax: its rescaling
 *     rounds differently); the CPU backend keeps each query's softmax row in scratch sized at
 *     creation (below), the reference backend recomputes scores instead.
 *   - attention, RILL_ATTN_FLASH: online softmax in one pass over the slots, in blocks of
 *     RILL_ATTN_FLASH_BLOCK (32) slots counted from slot 0 (whatever the page size), per
 *     (token, head), all in f32:
 *       s_j  = dot(q, K_j) * (1/sqrt(D))      the exact kernel's dot (F16 pool: q rounded to f16,
 *                                             ggml_vec_dot_f16; F32: ggml_vec_dot_f32), no mask
 *       bm   = max of the block's s_j         (m starts at -inf, S at 0, acc[D] at 0)
 *       if bm > m: c = ggml_expf(m - bm); S = S * c; acc[d] = acc[d] * c; m = bm
 *       then per slot j of the block in order: p = ggml_expf(s_j - m); S = S + p;
 *            acc[d] = fmaf(p, V_j[d], acc[d]) (V widened from f16, p never rounded to f16)
 *       out[d] = acc[d] * (1 / S)
 *     The rescale happens once per block, not per slot, and S and acc are single f32 sums in
 *     slot order. The reference, scalar and AVX2 kernels give the same bits for every batch,
 *     thread count and task split (a token's result never depends on its batch); finite inputs
 *     assumed. It is neither llama.cpp's flash path (that one rescales per slot with libm's expf
 *     and, for an F16 cache, accumulates V in f16) nor the exact kernel. Measured (tests/
 *     test_kernels.c, V in [-1, 1]): against the exact kernel the output differs by up to 4e-7
 *     (F32 pool) or 3.4e-4 (F16 pool, where the exact kernel rounds its weights to f16), against
 *     a double-precision softmax by up to 3e-7 for either pool. Forward pass with an F16 cache
 *     (tests/test_forward.c): logits within 1.7e-3 of their scale of llama.cpp's flash attention
 *     on F32-weight models, 2e-2 on quantized ones (whose activation rounding amplifies any
 *     attention difference: llama.cpp's own flash and non-flash paths differ as much), same
 *     top-1 wherever its margin is clear. Memory: O(block) per query, so every n_kv runs on the
 *     fast path. Speed: 0.8x the exact kernel's time for prefill, about 1x for decode
 *     (docs/benchmarks.md).
 *   - quantized caches (k_dtype or v_dtype Q8_0 / Q4_0; also K and V of different float types):
 *     what is written is llama.cpp's: each new K or V row goes through the quantizer llama.cpp's
 *     CPU backend uses for the cache type (Q8_0: the AVX2 quantize_row_q8_0's bytes; Q4_0:
 *     quantize_row_q4_0_ref's). What is read, in both kernels, per (token, head):
 *       quantized K: q is quantized once to Q8_0 (K's vec_dot type, as llama.cpp converts Q for
 *         its flash kernel and its mul_mat) and s_j = ggml_vec_dot_q8_0_q8_0 /
 *         ggml_vec_dot_q4_0_q8_0 of (K_j, q) (rill__dot_ggml, RILL__MM_VEC), times the scale;
 *         F16 / F32 K as above;
 *       quantized V: each V_j row is decoded to f32 (D values, on the stack: never a decoded copy
 *         of the cache) and summed as an F32 pool's V (exact: p not rounded; flash: fmaf);
 *         F16 V as above (exact: p rounded to f16).
 *     So with RILL_ATTN_FLASH every s_j and every decoded V_j equals llama.cpp's flash kernel's
 *     (ggml_compute_forward_flash_attn_ext_f16 reads K by vec_dot and V by to_float the same
 *     way); only the online softmax differs, as for an F32 cache (llama.cpp run with its
 *     attention rotation off, LLAMA_ATTN_ROT_DISABLE: by default it rotates Q, K and V by a
 *     Hadamard transform before a quantized cache, which rill does not; docs/quantization.md has
 *     the measured differences). llama.cpp needs flash attention
 *     for a quantized V; rill's exact kernel takes one anyway (its definition, not llama.cpp's).
 *     These layouts run the reference's per-head functions on every backend of the exact class
 *     (threaded over heads in "cpu"), so they give the reference's bits there too.
 * A forward pass, once per step (T tokens, E = n_embd, F = n_ff, L layers):
 *     set_batch(batch)                              positions, slots, page tables
 *     get_rows(x, tok_embd, ids, T)                 x: (T, E)
 *     per layer l:
 *       rms_norm(h, x, attn_norm, T, E, eps)
 *       matmul(q, h, wq, T); matmul(k, h, wk, T); matmul(v, h, wv, T)
 *       [qwen2: add_bias(q, bq, T); add_bias(k, bk, T); add_bias(v, bv, T)]
 *       rope(q, H, D, &rope); rope(k, Hkv, D, &rope)
 *       kv_store(&kv, pool[l], k, v)
 *       attention(&kv, pool[l], a, q, H)            a: (T, H * D)
 *       matmul(o, a, wo, T); add(x, x, o, T * E)
 *       rms_norm(h, x, ffn_norm, T, E, eps)
 *       matmul(g, h, wgate, T); matmul(u, h, wup, T); swiglu(g, g, u, T * F)
 *       matmul(o, g, wdown, T); add(x, x, o, T * E)
 *     copy the rows that need logits together (copy), rms_norm them with output_norm,
 *     matmul(logits, ..., output or tok_embd when tied, n), then copy_out, argmax (ids to the
 *     host) or argmax_resident (ids stay in backend memory; the next step's get_rows_resident
 *     reads them there).
 *   Buffers are backend allocations sized once for max_batch tokens; max_n_in must be >= F (the
 *   input width of ffn_down).
 *
 * Thread safety: a backend and everything allocated from it are used by one thread at a time
 * (the engine thread that owns it); the CPU backend's ops use its worker threads internally and
 * return when done (they block). Weights are immutable after rill_weight_new() and may be read
 * by any op of their backend.
 */
#ifndef RILL_BACKEND_H
#define RILL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_dtype.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_backend rill_backend_t;
typedef struct rill_weight rill_weight_t;

/* Which registry row a backend comes from (rill_backend_params_t.kind). */
typedef enum rill_backend_kind {
    RILL_BACKEND_REF = 0,
    RILL_BACKEND_CPU = 1,
    RILL_BACKEND_CUDA = 2 /* reserved: no row in this build (kernels/cuda/ will add one) */
} rill_backend_kind_t;

/* Numerics class of a backend (see "Numerics classes" at the top). */
typedef enum rill_numerics {
    RILL_NUMERICS_EXACT = 0,    /* bit-exact to llama.cpp's portable CPU build at the reference
                                   commit (flash attention: bit-exact to rill's flash kernel) */
    RILL_NUMERICS_TOLERANCE = 1 /* within stated tolerances */
} rill_numerics_t;

/* Kernel family of the CPU backend. */
typedef enum rill_simd {
    RILL_SIMD_AUTO = 0,   /* best the CPU supports; the environment variable RILL_SIMD=scalar,
                             avx2 or avx512 overrides AUTO (for tests and benchmarks) */
    RILL_SIMD_SCALAR = 1, /* portable C */
    RILL_SIMD_AVX2 = 2,   /* AVX2 + FMA + F16C; creation fails with RILL_EUNSUPPORTED without */
    RILL_SIMD_AVX512 = 3  /* AVX-512 (F, VL, BW): the AVX2 table's bits, with flash attention
                             in 512-bit vectors (1.3x the AVX2 flash kernel's speed on a CPU
                             with one 512-bit FMA port) and, where the CPU has AVX-512 VNNI, the
                             Q8_0, Q4_1 and 8-row Q4_0 matmul kernels too (docs/quantization.md);
                             creation fails with RILL_EUNSUPPORTED without AVX-512 F/VL/BW */
} rill_simd_t;

/* Attention kernel (every backend; see Numerics). Unlike RILL_SIMD there is no environment
 * override: the two kernels round differently, so which one runs is always the caller's
 * explicit choice (the CLI has --attn exact|flash). */
typedef enum rill_attn {
    RILL_ATTN_EXACT = 0, /* llama.cpp's non-flash arithmetic, bit for bit (default) */
    RILL_ATTN_FLASH = 1  /* one-pass online softmax, f32 accumulators, O(block) memory */
} rill_attn_t;

/* Slots per block of the flash kernel's online softmax (part of its numerics). */
#define RILL_ATTN_FLASH_BLOCK 32

/* The part of the parameters only the host (CPU) backends read: "ref" and "cpu". A device
 * backend ignores it. */
typedef struct rill_backend_cpu_params {
    int n_threads;    /* threads in all, caller included; 0 = one per online CPU (default).
                         "ref" always uses one. */
    rill_simd_t simd; /* "cpu": kernel family; default RILL_SIMD_AUTO. "ref" ignores it. */
} rill_backend_cpu_params_t;

typedef struct rill_backend_params {
    rill_backend_kind_t kind; /* registry row; default RILL_BACKEND_CPU */
    int32_t device;           /* which device of that backend (0 .. n_devices - 1, see
                                 rill_backend_registry_info); default 0, the only one of a CPU
                                 backend */
    int32_t max_batch;        /* most tokens in a batch / rows of one matmul call; default 512 */
    int64_t max_n_in;         /* widest matmul input row E; default 8192 */
    rill_attn_t attn;         /* attention kernel; default RILL_ATTN_EXACT */
    rill_backend_cpu_params_t cpu; /* "ref" and "cpu" only */
} rill_backend_params_t;

/* Scratch the CPU backend reserves at creation: max_batch * max_n_in * 4 bytes for the
 * quantized activations (16 MiB with the defaults), 256 KiB per thread for attention (exact:
 * softmax rows, and an f32 copy of the V rows a task shares: a task needing more is split, and a
 * single query over more than 65536 slots takes a slower path that recomputes scores; flash: the
 * running state of a task's queries, one block's scores and its K/V rows in f32, which fits for
 * every n_kv), plus the batch metadata (32 bytes per token). REF reserves max_n_in * 4 bytes.
 * Nothing is allocated per op or per token. */

/* Defaults as documented above. */
rill_backend_params_t rill_backend_default_params(void);

/* Creates a backend of the registry row params->kind on device params->device. params NULL
 * means the defaults. Errors (each also logged through rill_log with the reason):
 *   RILL_EINVAL       a field out of range: kind not a rill_backend_kind_t, device < 0,
 *                     max_batch < 1, max_n_in < 1 or max_batch * max_n_in * 4 > 2^40, attn not a
 *                     rill_attn_t; for "ref" and "cpu" cpu.n_threads < 0 or > 512, cpu.simd not
 *                     a rill_simd_t;
 *   RILL_EUNSUPPORTED no row of that kind in this build (RILL_BACKEND_CUDA today), or "cpu" with
 *                     a SIMD level this CPU lacks (rill_backend_simd_unsupported says which);
 *   RILL_ENOTFOUND    device >= the row's device count here (a row with no device here, e.g.
 *                     a GPU backend on a machine without one, has no valid device index);
 *   RILL_ENOMEM, RILL_EINTERNAL (a worker thread could not start).
 * On error nothing is left allocated. Caller owns *out; destroy with rill_backend_destroy().
 * Thread-safe (the registry is immutable). */
rill_err_t rill_backend_new(const rill_backend_params_t *params, rill_backend_t **out);

/* Frees the backend and sets *bp = NULL. NULL-safe. Allocations and weights of the backend must
 * have been freed first (the CPU backends do not track them). */
void rill_backend_destroy(rill_backend_t **bp);

/* Why a CPU backend of SIMD level simd (AUTO: as RILL_SIMD overrides it) cannot be created on
 * this CPU, for the message after RILL_EUNSUPPORTED, e.g. "RILL_SIMD=avx512 asks for kernels
 * this CPU lacks (AVX-512 F, VL or BW)"; NULL when it can. Static string. */
const char *rill_backend_simd_unsupported(rill_simd_t simd);

/* "ref", "cpu-avx512", "cpu-avx2" or "cpu-scalar": which kernels run (the registry row's name
 * is rill_backend_registry_info(row of rill_backend_kind(b)).name). Static string; "?" for
 * NULL. */
const char *rill_backend_name(const rill_backend_t *b);

/* The registry row (kind) and device index it was created with (RILL_BACKEND_REF / 0 for NULL). */
rill_backend_kind_t rill_backend_kind(const rill_backend_t *b);
int32_t rill_backend_device(const rill_backend_t *b);

/* The numerics class of b's results relative to llama.cpp (see Numerics classes): its row's
 * class, except that an instance of an exact row created with RILL_ATTN_FLASH answers
 * RILL_NUMERICS_TOLERANCE, because its attention is rill's flash kernel (bit-exact across the
 * exact rows to rill's definition, within stated tolerances of llama.cpp). RILL_NUMERICS_EXACT
 * for NULL. */
rill_numerics_t rill_backend_numerics(const rill_backend_t *b);

/* "exact" or "tolerance" (static string; "?" for a value outside the enum). */
const char *rill_numerics_name(rill_numerics_t numerics);

/* Threads the backend computes with (1 for REF). */
int rill_backend_n_threads(const rill_backend_t *b);

/* The limits it was created with. */
int32_t rill_backend_max_batch(const rill_backend_t *b);
int64_t rill_backend_max_n_in(const rill_backend_t *b);

/* The attention kernel it was created with (RILL_ATTN_EXACT for NULL). */
rill_attn_t rill_backend_attn(const rill_backend_t *b);

/* "exact" or "flash" (static string; "?" for a value outside the enum). */
const char *rill_attn_name(rill_attn_t attn);

/* ---- the registry ------------------------------------------------------------------------- */

/* One registry row, as rill_backend_registry_info() reports it. */
typedef struct rill_backend_info {
    const char *name;         /* "ref", "cpu" (static string) */
    rill_backend_kind_t kind; /* what to put in rill_backend_params_t.kind */
    rill_numerics_t numerics; /* the class of its ops (see Numerics classes) */
    int32_t n_devices;        /* devices usable on this machine now; 0: not available here */
    const char *summary;      /* one line for listings (static string) */
} rill_backend_info_t;

/* Rows in the registry, available here or not (>= 2: "ref" and "cpu"). Thread-safe. */
int32_t rill_backend_registry_count(void);

/* Fills *out with row index (0 .. count - 1; row 0 is "ref", the oracle). Errors: RILL_EINVAL
 * (out NULL), RILL_ERANGE (index outside the table; *out untouched). Thread-safe. */
rill_err_t rill_backend_registry_info(int32_t index, rill_backend_info_t *out);

/* The row index of the backend called name ("ref", "cpu"; exact, case-sensitive). Errors:
 * RILL_EINVAL (NULL), RILL_ENOTFOUND (no such row; *index untouched). Thread-safe. */
rill_err_t rill_backend_registry_find(const char *name, int32_t *index);

/* ---- memory ------------------------------------------------------------------------------- */

/* Allocates `bytes` (> 0) of backend memory, 64-byte aligned, contents undefined.
 * Errors: RILL_EINVAL, RILL_ENOMEM. Caller owns *out; release with rill_backend_free(). */
rill_err_t rill_backend_alloc(rill_backend_t *b, size_t bytes, void **out);

/* Releases memory from rill_backend_alloc(). NULL is a no-op. */
void rill_backend_free(rill_backend_t *b, void *p);

/* Host -> backend, backend -> host, backend -> backend copies of `bytes` bytes (regions must not
 * overlap, except dst == src for copy). Blocking: when they return the data is in place. */
rill_err_t rill_backend_copy_in(rill_backend_t *b, void *dst, const void *src_host, size_t bytes);
rill_err_t rill_backend_copy_out(rill_backend_t *b, void *dst_host, const void *src, size_t bytes);
rill_err_t rill_backend_copy(rill_backend_t *b, void *dst, const void *src, size_t bytes);

/* Sets `bytes` bytes of backend memory to zero. */
rill_err_t rill_backend_zero(rill_backend_t *b, void *dst, size_t bytes);

/* Waits until all queued work is done (the CPU backends run every op synchronously: no-op). */
rill_err_t rill_backend_sync(rill_backend_t *b);

/* ---- weights ------------------------------------------------------------------------------ */

/* Prepares a weight for b (llama.cpp's "prepare"/upload step): a matrix of ne1 rows of ne0
 * values of type dtype, rows contiguous (GGUF's ne0 = row length), starting at host_ptr.
 * Vectors (norm weights, biases) have ne1 = 1. CPU backends keep host_ptr (zero copy; the memory
 * must stay valid and unchanged until rill_weight_destroy()); no bytes are copied.
 * Errors: RILL_EINVAL (NULL pointer, dtype not valid or an activation-only type, ne0 < 1 or not a
 * whole number of blocks, ne1 < 1, size overflow), RILL_ENOMEM.
 * Caller owns *out; destroy with rill_weight_destroy() before destroying b. */
rill_err_t rill_weight_new(rill_backend_t *b, rill_dtype_t dtype, const void *host_ptr, int64_t ne0,
                           int64_t ne1, rill_weight_t **out);

/* Releases a weight and sets *wp = NULL. NULL-safe. */
void rill_weight_destroy(rill_weight_t **wp);

/* Marks w as the model's token embedding. llama.cpp never repacks the embedding (it is read by
 * get_rows), so when a model ties its output projection to it, llama.cpp multiplies with the
 * plain (vec_dot/tinyBLAS) kernels even where it would repack another weight of that type
 * (Q4_0 with a multiple of 8 rows). After this call the fast backend follows suit for w, so the
 * tied logits keep llama.cpp's bits. Call it once after rill_weight_new(), before w is used.
 * Errors: RILL_EINVAL (w NULL). */
rill_err_t rill_weight_mark_embedding(rill_weight_t *w);

/* Type and shape of a weight (w must not be NULL). */
rill_dtype_t rill_weight_dtype(const rill_weight_t *w);
int64_t rill_weight_ne0(const rill_weight_t *w);
int64_t rill_weight_ne1(const rill_weight_t *w);

/* ---- batch -------------------------------------------------------------------------------- */

typedef struct rill_page_table {
    const int32_t *pages; /* host: pages[i] = pool page holding slots [i*P, i*P + P) */
    int32_t n_pages;      /* entries in pages (>= 0) */
} rill_page_table_t;

typedef struct rill_batch_token {
    int32_t seq;  /* index into rill_batch_t.seq */
    int32_t pos;  /* RoPE position (>= 0) */
    int32_t slot; /* KV slot its k/v are stored at (>= 0) */
    int32_t n_kv; /* it attends to slots [0, n_kv) of its sequence (>= 1) */
} rill_batch_token_t;

typedef struct rill_batch {
    int32_t n_tok;                 /* T, 1..max_batch */
    const rill_batch_token_t *tok; /* host: [n_tok] */
    int32_t n_seq;                 /* 1..max_batch */
    const rill_page_table_t *seq;  /* host: [n_seq] */
} rill_batch_t;

/* Installs the batch that rope, kv_store, kv-dependent checks and attention use until the next
 * call. The token and sequence arrays are copied; the page tables they point to are borrowed and
 * must stay valid and unchanged until the next rill_backend_set_batch() (or until the last op of
 * the step has returned). Page indices and slots are checked against a pool's layout by the ops
 * that use a pool. Errors: RILL_EINVAL (NULL, a field out of range), RILL_ERANGE (n_tok or n_seq
 * > max_batch). On error the previous batch stays installed. */
rill_err_t rill_backend_set_batch(rill_backend_t *b, const rill_batch_t *batch);

/* ---- ops ---------------------------------------------------------------------------------- */

/* Embedding lookup: y[i, :] = row ids[i] of w decoded to f32, for i < n. y: (n, w.ne0).
 * ids is a host array of n token ids. Any weight dtype. Errors: RILL_EINVAL (NULL, n < 1,
 * an id outside [0, w.ne1)). */
rill_err_t rill_backend_get_rows(rill_backend_t *b, float *y, const rill_weight_t *w,
                                 const int32_t *ids, int64_t n);

/* rill_backend_get_rows() with ids in backend memory (n int32 ids, e.g. written by
 * rill_backend_argmax_resident()): the embedding of tokens that never went through the host.
 * Every id is checked against [0, w.ne1) before anything is written. Errors: RILL_EINVAL (NULL,
 * n < 1, an id outside [0, w.ne1): y unchanged). Blocking (a device backend reads the check's
 * outcome back, 4 bytes, not the ids). */
rill_err_t rill_backend_get_rows_resident(rill_backend_t *b, float *y, const rill_weight_t *w,
                                          const int32_t *ids, int64_t n);

/* RMSNorm of n_rows rows of length n: y = x / sqrt(mean(x^2) + eps) [* w]. w is an F32 vector of
 * n values (ne1 = 1), or NULL for no weight. y may equal x. Errors: RILL_EINVAL. */
rill_err_t rill_backend_rms_norm(rill_backend_t *b, float *y, const float *x,
                                 const rill_weight_t *w, int64_t n_rows, int64_t n, float eps);

/* y (T, O) = x (T, E) . W^T, W of (O rows, E values) of any weight dtype: E = w.ne0,
 * O = w.ne1, T = n_tok. y must not overlap x. Errors: RILL_EINVAL (NULL, n_tok < 1),
 * RILL_ERANGE (n_tok > max_batch or E > max_n_in). */
rill_err_t rill_backend_matmul(rill_backend_t *b, float *y, const float *x, const rill_weight_t *w,
                               int64_t n_tok);

/* x (n_rows, n) += bias (n) for every row; bias is an F32 vector (ne1 = 1), n = bias.ne0. */
rill_err_t rill_backend_add_bias(rill_backend_t *b, float *x, const rill_weight_t *bias,
                                 int64_t n_rows);

/* y[i] = a[i] + c[i] for i < n (residual add). y may equal a or c. */
rill_err_t rill_backend_add(rill_backend_t *b, float *y, const float *a, const float *c, int64_t n);

/* y[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), for i < n, with ggml's exp (see
 * Numerics). y may equal gate or up. */
rill_err_t rill_backend_swiglu(rill_backend_t *b, float *y, const float *gate, const float *up,
                               int64_t n);

typedef enum rill_rope_mode {
    RILL_ROPE_NORM = 0, /* adjacent pairs (x[2i], x[2i+1]): llama.cpp for LLM_ARCH_LLAMA */
    RILL_ROPE_NEOX = 2  /* halves (x[i], x[i + n_rot/2]): llama.cpp for LLM_ARCH_QWEN2 */
} rill_rope_mode_t;     /* values are ggml's / llama.cpp's rope types */

typedef struct rill_rope {
    rill_rope_mode_t mode;
    int32_t n_rot;    /* rotary dims (even, 2..D); dims [n_rot, D) pass through unchanged */
    float freq_base;  /* theta base, e.g. 10000 (Llama 2), 1e5 (SmolLM2), 1e6 (Qwen2) */
    float freq_scale; /* linear position scaling; 1 for none */
} rill_rope_t;

/* Rotates x (T, n_heads, head_dim) in place, token t by the installed batch's tok[t].pos (T =
 * batch n_tok). Errors: RILL_EINVAL (no batch, NULL, n_rot odd / > head_dim / < 2, head_dim odd,
 * freq_base <= 0). */
rill_err_t rill_backend_rope(rill_backend_t *b, float *x, int32_t n_heads, int32_t head_dim,
                             const rill_rope_t *rope);

/* A pool's cache types, as llama.cpp's --cache-type-k / --cache-type-v: K and V each F32, F16
 * (llama.cpp's default), Q8_0 or Q4_0 (ggml's blocks, head_dim a multiple of 32). */
typedef struct rill_kv_layout {
    rill_dtype_t k_dtype; /* K's type: RILL_DTYPE_F32, _F16, _Q8_0 or _Q4_0 */
    rill_dtype_t v_dtype; /* V's type: the same four */
    int32_t page_size;    /* P >= 1, default 16 */
    int32_t n_kv_heads;   /* Hkv >= 1 */
    int32_t head_dim;     /* D, 1..RILL_KV_MAX_HEAD_DIM */
    int32_t n_pages;      /* pages in the pool (>= 1) */
} rill_kv_layout_t;

#define RILL_KV_MAX_HEAD_DIM 256
#define RILL_KV_PAGE_SIZE    16 /* the default P */

/* True when t can be a KV cache type (F32, F16, Q8_0, Q4_0) for rows of head_dim values: the
 * block types need head_dim to be a multiple of 32 (a row is whole blocks, as in llama.cpp). */
bool rill_kv_type_ok(rill_dtype_t t, int32_t head_dim);

/* Bytes of one page (K and V), or -1 for an invalid layout. */
int64_t rill_kv_page_bytes(const rill_kv_layout_t *kv);

/* Bytes of the whole pool (n_pages pages), or -1 for an invalid layout. */
int64_t rill_kv_pool_bytes(const rill_kv_layout_t *kv);

/* Stores k (T, Hkv, D) and v (T, Hkv, D) of every batch token at its slot in `pool` (a backend
 * allocation of rill_kv_pool_bytes() bytes), converting K to kv->k_dtype and V to kv->v_dtype
 * (f16 round to nearest even; Q8_0 and Q4_0 row by row with the quantizers llama.cpp's CPU
 * backend uses when it writes a quantized cache: rill_quantize_row's bytes, see Numerics,
 * quantized caches). Two tokens of the batch
 * must not name the same (sequence page, slot). Errors: RILL_EINVAL (no batch, invalid layout,
 * a slot beyond its page table, a page index outside [0, kv->n_pages)). */
rill_err_t rill_backend_kv_store(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                 const float *k, const float *v);

/* Grouped-query attention of the batch over the paged pool, with the kernel chosen at creation
 * (params.attn: llama.cpp's non-flash arithmetic, or the one-pass flash kernel; see Numerics):
 *   out[t, h, :] = sum_{s < n_kv(t)} softmax_s(q[t,h,:] . K[s, h / G, :] / sqrt(D)) V[s, h / G, :]
 * with q (T, n_head, D), out (T, n_head * D), G = n_head / Hkv (n_head a multiple of Hkv), K/V of
 * token t's sequence. out must not overlap q. Any n_kv the page table covers runs with the
 * scratch reserved at creation (no allocation). Errors: RILL_EINVAL (no batch, invalid layout,
 * n_head not a multiple of Hkv, n_kv beyond the page table, a page index out of range). */
rill_err_t rill_backend_attention(rill_backend_t *b, const rill_kv_layout_t *kv, const void *pool,
                                  float *out, const float *q, int32_t n_head);

/* Re-rotates the K rows of the listed pages (all P slots, every KV head) by `delta` positions
 * (RoPE rotations compose, so keys stored at position p end up as if stored at p + delta): the
 * re-basing step of a sliding window. pages is a host array of n_pages page indices. V is left
 * alone. A quantized K row is decoded, rotated in f32 and quantized again (as llama.cpp's
 * K-shift does for a quantized cache: one more rounding per shift). Errors: RILL_EINVAL. */
rill_err_t rill_backend_kv_rope_shift(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                      const int32_t *pages, int32_t n_pages, int32_t delta,
                                      const rill_rope_t *rope);

/* Copies whole pages (K and V, every KV head) inside each of n_pools pools of layout kv: for
 * every pool p < n_pools and every i < n, page dst[i] of pools[p] becomes a copy of page src[i]
 * of the same pool (source pages are never written, see below). One call does the
 * copy-on-write of many pages in every layer at once (pass every layer's pool of a KV cache), so
 * a device backend can launch it as one batch instead of n_pools * n copies.
 *   pools: host array of n_pools backend pointers, each an allocation of at least
 *          rill_kv_pool_bytes(kv) bytes; no two pools may overlap (nor be the same pool);
 *   src, dst: host arrays of n page indices in [0, kv->n_pages). A source page may repeat
 *          (one page copied to several); a destination may not, and no destination may also be
 *          a source (src[i] == dst[i] included), so the result never depends on the order of
 *          the copies.
 * The checks cost O(n^2 + n_pools^2) comparisons (no allocation), small next to copying n pages
 * n_pools times. n == 0 or n_pools == 0 copies nothing. Errors: RILL_EINVAL (NULL, invalid
 * layout, n or n_pools < 0, a page index out of range, a repeated destination, a destination
 * that is also a source, overlapping pools); on error nothing is copied. Blocking. */
rill_err_t rill_backend_kv_copy_pages(rill_backend_t *b, const rill_kv_layout_t *kv,
                                      void *const *pools, int32_t n_pools, const int32_t *src,
                                      const int32_t *dst, int32_t n);

/* out_host[r] = index of the largest value of row r of x (n_rows, n_cols) (the first one on
 * ties, NaN never wins), for r < n_rows. out_host is a host array. Errors: RILL_EINVAL. */
rill_err_t rill_backend_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                               int32_t *out_host);

/* rill_backend_argmax() writing into backend memory: ids[r] (n_rows int32 values, a backend
 * allocation) = the index of the largest value of row r of x (the first on ties, NaN never
 * wins; 0 for a row of NaN or -inf only). The ids stay in backend memory until someone copies
 * them out (rill_backend_copy_out) or feeds them to rill_backend_get_rows_resident(): a decode
 * loop needs no round trip through the host. Errors: RILL_EINVAL (NULL, n_rows < 1, n_cols < 1
 * or > INT32_MAX). ids must not overlap x. */
rill_err_t rill_backend_argmax_resident(rill_backend_t *b, const float *x, int64_t n_rows,
                                        int64_t n_cols, int32_t *ids);

/* ---- encoder-decoder ops (Whisper) ---------------------------------------------------------
 *
 * What an encoder-decoder model (Whisper: conv stem, pre-norm encoder, decoder with
 * cross-attention) needs beside the ops above. They have no llama.cpp counterpart: their
 * arithmetic is rill's own, stated lane by lane in kernels/encdec_ref.c (encdec_internal.h) and
 * summarized with each function. Every backend of the exact class ("ref", "cpu" at every SIMD
 * level) gives the reference's bits for them, whatever the thread count; relative to an outside
 * implementation (CTranslate2, the Whisper oracle) they are within tolerances only, stated by
 * forward/'s tests. Their rows in the backend-ops test (tests/test_kernels.c) hold a
 * tolerance-class backend to: layer_norm 1e-6 and gelu 2e-6 of the output's magnitude, im2col 0,
 * attention_dense 2e-6 absolute (V in [-1, 1]). */

/* LayerNorm of n_rows rows of n values: y = (x - mean) / sqrt(var + eps) * gamma + beta, mean
 * and (biased) variance over the row, summed in double; gamma and beta F32 vectors of n values.
 * y may equal x. Errors: RILL_EINVAL (NULL, n_rows or n < 1, eps < 0 or NaN, gamma/beta not f32
 * vectors of n values). */
rill_err_t rill_backend_layer_norm(rill_backend_t *b, float *y, const float *x,
                                   const rill_weight_t *gamma, const rill_weight_t *beta,
                                   int64_t n_rows, int64_t n, float eps);

/* y[i] = gelu(x[i]) for i < n, the erf form 0.5 x (1 + erf(x / sqrt 2)) with libm's erff (the
 * form CTranslate2 and OpenAI's Whisper use). y may equal x. Errors: RILL_EINVAL. */
rill_err_t rill_backend_gelu(rill_backend_t *b, float *y, const float *x, int64_t n);

/* A 1-D convolution's input geometry for rill_backend_im2col_1d(): n_ch channels of n_in time
 * steps; element (c, s) of the input is at x[c * ch_stride + s * t_stride] (a channel-major
 * (C, T) input has ch_stride = n_in, t_stride = 1; a time-major (T, C) one ch_stride = 1,
 * t_stride = n_ch); kernel taps, stride, zero padding on both ends. */
typedef struct rill_conv1d {
    int64_t n_ch, n_in;
    int64_t ch_stride, t_stride;
    int32_t kernel; /* K >= 1 */
    int32_t stride; /* >= 1 */
    int32_t pad;    /* >= 0, < K */
} rill_conv1d_t;

/* Output steps of the convolution: (n_in + 2 pad - kernel) / stride + 1, or -1 for an invalid
 * geometry (a field out of range, fewer padded steps than taps). */
int64_t rill_conv1d_n_out(const rill_conv1d_t *cv);

/* The im2col matrix of a 1-D convolution: y (n_out, n_ch * kernel), row t = for each channel c
 * its kernel taps j at input step t * stride + j - pad (0 outside the input), c major. A
 * convolution weight stored (out, in, k) row-major, as CTranslate2 and PyTorch store it, is then
 * a matrix of out rows of n_ch * kernel values, and rill_backend_matmul(y', im2col, w, n_out)
 * is the convolution (T, out), time-major. No rounding. y must not overlap x.
 * Errors: RILL_EINVAL (NULL, invalid geometry). */
rill_err_t rill_backend_im2col_1d(rill_backend_t *b, float *y, const float *x,
                                  const rill_conv1d_t *cv);

/* Dense (non-paged, non-causal) multi-head attention of n_q queries over n_kv keys:
 *   out[i, h, :] = sum_j softmax_j(q[i,h,:] . k[j,h,:] / sqrt(D)) v[j,h,:]
 * q (n_q, H, D), k and v (n_kv, H, D), out (n_q, H * D), all contiguous. Every query sees every
 * key (Whisper's encoder self-attention and the decoder's cross-attention over an encoded
 * window). Arithmetic (encdec_internal.h): dot products in 8 FMA lanes reduced as hsum_a, times
 * the f32 scale 1 / sqrtf(D); softmax with ggml's exp of s - max and an f32 sum in key order;
 * V weighted by FMAs in key order, then times 1 / sum. Scratch: the CPU backend keeps a query's
 * scores in its attention scratch (n_kv <= 65536; longer rows recompute them, same bits), the
 * reference recomputes them. out must not overlap q, k or v. Errors: RILL_EINVAL (NULL,
 * n_q/n_kv/n_head < 1, head_dim outside 1..RILL_KV_MAX_HEAD_DIM). */
rill_err_t rill_backend_attention_dense(rill_backend_t *b, float *out, const float *q,
                                        const float *k, const float *v, int64_t n_q, int64_t n_kv,
                                        int32_t n_head, int32_t head_dim);

#ifdef __cplusplus
}
#endif
#endif /* RILL_BACKEND_H */
