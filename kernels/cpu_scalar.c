/*
 * cpu_scalar.c - the portable kernel table of the fast CPU backend.
 *
 * It is the fallback for CPUs without AVX2 and the second opinion in tests. The dot products are
 * the reference ones (vecdot.c): there is no value in a second scalar formulation, and sharing
 * them means the scalar fast path differs from the reference backend only in threading, tiling
 * and the online softmax, which is exactly what the tests then isolate. Attention here is the
 * flash-style algorithm of the AVX2 kernel written with plain loops: one pass over the pages,
 * running max m, running sum l, accumulator rescaled by exp(m_old - m_new) when the max grows.
 */
#include <math.h>
#include <string.h>

#include "backend_internal.h"
#include "cpu_internal.h"

static void tile_dot(rill_dtype_t wt, int64_t n, const void *w, const void *act, size_t as, int nt,
                     float *y, int64_t ys) {
    for (int t = 0; t < nt; t++) {
        y[t * ys] = (float)rill__dot_ref(wt, w, (const char *)act + (size_t)t * as, n);
    }
}

static void act_quant(rill_dtype_t wt, const float *x, void *act, int64_t n) {
    rill__act_quantize_ref(wt, x, act, n);
}

/* One named wrapper per weight type, so that the table holds plain function pointers. */
#define SCALAR_TYPE(T)                                                                           \
    static void tile_##T(int64_t n, const void *w, const void *act, size_t as, int nt, float *y, \
                         int64_t ys) {                                                           \
        tile_dot(RILL_DTYPE_##T, n, w, act, as, nt, y, ys);                                      \
    }                                                                                            \
    static void act_##T(const float *x, void *act, int64_t n) {                                  \
        act_quant(RILL_DTYPE_##T, x, act, n);                                                    \
    }

SCALAR_TYPE(F32)
SCALAR_TYPE(F16)
SCALAR_TYPE(BF16)
SCALAR_TYPE(Q4_0)
SCALAR_TYPE(Q4_1)
SCALAR_TYPE(Q8_0)
SCALAR_TYPE(Q4_K)
SCALAR_TYPE(Q5_K)
SCALAR_TYPE(Q6_K)
#undef SCALAR_TYPE

static void rms_norm_row(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)x[i] * x[i];
    }
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) {
        y[i] = w != NULL ? (x[i] * scale) * w[i] : x[i] * scale;
    }
}

static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

static void add(float *y, const float *a, const float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = a[i] + c[i];
    }
}

static void to_f16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = rill_f32_to_fp16(src[i]);
    }
}

static void load_row(const rill_kv_layout_t *kv, const uint8_t *src, float *dst) {
    if (kv->dtype == RILL_DTYPE_F16) {
        const uint16_t *h = (const uint16_t *)src;
        for (int32_t d = 0; d < kv->head_dim; d++) {
            dst[d] = rill_fp16_to_f32(h[d]);
        }
    } else {
        memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
    }
}

static void attention(const rill__attn_task_t *a) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t D = kv->head_dim, P = kv->page_size, nq = a->n_q;
    const float scale = 1.0f / sqrtf((float)D);
    float qf[RILL__ATTN_MAX_Q][RILL_KV_MAX_HEAD_DIM], acc[RILL__ATTN_MAX_Q][RILL_KV_MAX_HEAD_DIM];
    float m[RILL__ATTN_MAX_Q], l[RILL__ATTN_MAX_Q];
    float kf[RILL_KV_MAX_HEAD_DIM], vf[RILL_KV_MAX_HEAD_DIM];
    for (int32_t i = 0; i < nq; i++) {
        for (int32_t d = 0; d < D; d++) {
            const float x = a->q[i * D + d];
            qf[i][d] = kv->dtype == RILL_DTYPE_F16 ? rill_fp16_to_f32(rill_f32_to_fp16(x)) : x;
            acc[i][d] = 0.0f;
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int32_t s = 0; s < a->n_kv; s++) {
        const int32_t page = a->pages[s / P], row = s % P;
        load_row(kv, rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 0), kf);
        load_row(kv, rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 1), vf);
        for (int32_t i = 0; i < nq; i++) {
            float sc = 0.0f;
            for (int32_t d = 0; d < D; d++) {
                sc += qf[i][d] * kf[d];
            }
            sc *= scale;
            if (sc > m[i]) { /* new running max: rescale what was accumulated so far */
                const float corr = expf(m[i] - sc);
                l[i] *= corr;
                for (int32_t d = 0; d < D; d++) {
                    acc[i][d] *= corr;
                }
                m[i] = sc;
            }
            const float p = expf(sc - m[i]);
            l[i] += p;
            for (int32_t d = 0; d < D; d++) {
                acc[i][d] += p * vf[d];
            }
        }
    }
    for (int32_t i = 0; i < nq; i++) {
        const float inv = 1.0f / l[i];
        for (int32_t d = 0; d < D; d++) {
            a->out[i * D + d] = acc[i][d] * inv;
        }
    }
}

static const rill__cpu_kernels_t scalar_kernels = {
    .name = "scalar",
    .tile = {
        [RILL_DTYPE_F32] = tile_F32,
        [RILL_DTYPE_F16] = tile_F16,
        [RILL_DTYPE_BF16] = tile_BF16,
        [RILL_DTYPE_Q4_0] = tile_Q4_0,
        [RILL_DTYPE_Q4_1] = tile_Q4_1,
        [RILL_DTYPE_Q8_0] = tile_Q8_0,
        [RILL_DTYPE_Q4_K] = tile_Q4_K,
        [RILL_DTYPE_Q5_K] = tile_Q5_K,
        [RILL_DTYPE_Q6_K] = tile_Q6_K,
    },
    .act = {
        [RILL_DTYPE_F32] = NULL,
        [RILL_DTYPE_F16] = act_F16,
        [RILL_DTYPE_BF16] = act_BF16,
        [RILL_DTYPE_Q4_0] = act_Q4_0,
        [RILL_DTYPE_Q4_1] = act_Q4_1,
        [RILL_DTYPE_Q8_0] = act_Q8_0,
        [RILL_DTYPE_Q4_K] = act_Q4_K,
        [RILL_DTYPE_Q5_K] = act_Q5_K,
        [RILL_DTYPE_Q6_K] = act_Q6_K,
    },
    .act_row_bytes = rill__act_row_bytes,
    .rms_norm_row = rms_norm_row,
    .swiglu = swiglu,
    .add = add,
    .to_f16 = to_f16,
    .attention = attention,
};

const rill__cpu_kernels_t *rill__cpu_kernels_scalar(void) {
    (void)act_F32; /* F32 needs no conversion: the table entry stays NULL */
    return &scalar_kernels;
}
