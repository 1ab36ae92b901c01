#include "kernels.h"
#include <math.h>
#include <string.h>
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif
// arm64: NEON (part of every ARMv8-A core) where x86-64 has AVX2, and the
// hardware's half-precision conversions where it has F16C.
#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#define RD_NEON 1
#endif

static inline float h2f(uint16_t h) {
#ifdef __F16C__
    return _cvtsh_ss(h);
#elif defined(RD_NEON)
    __fp16 v;
    memcpy(&v, &h, 2);
    return (float)v;
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void rd_f16_to_f32(const uint16_t *src, float *dst, long n) {
    long i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#elif defined(RD_NEON)
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vld1_f16((const __fp16 *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = h2f(src[i]);
}

void rd_dequant(int typ, const uint8_t *src, float *dst, long n) {
    long nb = n / 32;
    switch (typ) {
    case RD_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case RD_F16:
        rd_f16_to_f32((const uint16_t *)src, dst, n);
        return;
    case RD_Q8_0:
        for (long b = 0; b < nb; b++, src += 34, dst += 32) {
            float d = h2f(ld16(src));
            const int8_t *q = (const int8_t *)(src + 2);
            for (int j = 0; j < 32; j++) dst[j] = d * (float)q[j];
        }
        return;
    case RD_Q4_0:
        for (long b = 0; b < nb; b++, src += 18, dst += 32) {
            float d = h2f(ld16(src));
            const uint8_t *q = src + 2;
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)((q[j] & 15) - 8);
                dst[j + 16] = d * (float)((q[j] >> 4) - 8);
            }
        }
        return;
    case RD_Q4_1:
        for (long b = 0; b < nb; b++, src += 20, dst += 32) {
            float d = h2f(ld16(src)), m = h2f(ld16(src + 2));
            const uint8_t *q = src + 4;
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)(q[j] & 15) + m;
                dst[j + 16] = d * (float)(q[j] >> 4) + m;
            }
        }
        return;
    case RD_Q5_0:
        for (long b = 0; b < nb; b++, src += 22, dst += 32) {
            float d = h2f(ld16(src));
            uint32_t qh = ld32(src + 2);
            const uint8_t *q = src + 6;
            for (int j = 0; j < 16; j++) {
                int lo = (q[j] & 15) | (((qh >> j) & 1) << 4);
                int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
                dst[j] = d * (float)(lo - 16);
                dst[j + 16] = d * (float)(hi - 16);
            }
        }
        return;
    case RD_Q5_1:
        for (long b = 0; b < nb; b++, src += 24, dst += 32) {
            float d = h2f(ld16(src)), m = h2f(ld16(src + 2));
            uint32_t qh = ld32(src + 4);
            const uint8_t *q = src + 8;
            for (int j = 0; j < 16; j++) {
                int lo = (q[j] & 15) | (((qh >> j) & 1) << 4);
                int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
                dst[j] = d * (float)lo + m;
                dst[j + 16] = d * (float)hi + m;
            }
        }
        return;
    }
}

#ifdef __AVX2__
static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}
#endif

static inline float dot(const float *a, const float *b, int n) {
    int i = 0;
    float r = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    r = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#elif defined(RD_NEON)
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    r = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
#endif
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// dot_f16 multiplies a row of halves with a float32 vector.
static inline float dot_f16(const uint8_t *h, const float *b, int n) {
    const uint16_t *a = (const uint16_t *)h;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8))), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 16))), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 24))), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))), _mm256_loadu_ps(b + i), s0);
    float r = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) r += _cvtsh_ss(a[i]) * b[i];
    return r;
}
#define HAVE_DOT_F16 1
#elif defined(RD_NEON)
static inline float dot_f16(const uint8_t *h, const float *b, int n) {
    const __fp16 *a = (const __fp16 *)h;
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vcvt_f32_f16(vld1_f16(a + i)), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vcvt_f32_f16(vld1_f16(a + i + 4)), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vcvt_f32_f16(vld1_f16(a + i + 8)), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vcvt_f32_f16(vld1_f16(a + i + 12)), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vcvt_f32_f16(vld1_f16(a + i)), vld1q_f32(b + i));
    float r = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) r += (float)a[i] * b[i];
    return r;
}
#define HAVE_DOT_F16 1
#else
static inline float dot_f16(const uint8_t *h, const float *b, int n) {
    float r = 0;
    for (int i = 0; i < n; i++) r += h2f(ld16(h + 2 * i)) * b[i];
    return r;
}
#endif

// row_f32 returns the row at src as float32: itself for F32, else
// dequantised into tmp.
static inline const float *row_f32(int typ, const uint8_t *src, int cols, float *tmp) {
    if (typ == RD_F32) return (const float *)src;
    rd_dequant(typ, src, tmp, cols);
    return tmp;
}

// The row products leave prefetching to the hardware: on huge pages
// (huge.go) a software prefetch 6 KB ahead made them 3-8% slower.
void rd_gemv_rows(int typ, const uint8_t *W, long rowBytes, const float *x, int n, int cols,
                  float *y, int ldy, int r0, int r1, float *tmp) {
    for (int r = r0; r < r1; r++) {
        const uint8_t *src = W + (long)r * rowBytes;
#ifdef HAVE_DOT_F16
        if (typ == RD_F16 && n <= 2) {
            for (int t = 0; t < n; t++) y[(long)t * ldy + r] = dot_f16(src, x + (long)t * cols, cols);
            continue;
        }
#endif
        const float *row = row_f32(typ, src, cols, tmp);
        for (int t = 0; t < n; t++) y[(long)t * ldy + r] = dot(row, x + (long)t * cols, cols);
    }
}

// expf for x <= 0 (softmax inputs after max subtraction), accurate to a few
// ulp, written so that gcc vectorises loops over it.
static inline float exp_neg(float x) {
    if (x < -87.0f) x = -87.0f;
    float t = x * 1.44269504088896341f;
    float k = floorf(t + 0.5f);
    float r = x - k * 0.693145751953125f - k * 1.428606765330187045e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)k + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

#if defined(__AVX2__) && defined(__FMA__)
// exp_neg8 is exp_neg on eight lanes.
static inline __m256 exp_neg8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

#ifdef RD_NEON
// exp_neg4 is exp_neg on four lanes.
static inline float32x4_t exp_neg4(float32x4_t x) {
    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    float32x4_t k = vrndmq_f32(vfmaq_f32(vdupq_n_f32(0.5f), x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693145751953125f));
    r = vfmsq_f32(r, k, vdupq_n_f32(1.428606765330187045e-06f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), vmulq_f32(p, r), r);
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}
#endif

// exp_rows replaces x[0..n) by exp(scale·x - m), where m = max scale·x,
// and returns their sum and m.
static float exp_rows(float *x, int n, float scale, float *mo) {
    int j = 0;
    float mx = -INFINITY;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 vs = _mm256_set1_ps(scale), vmx = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), vs);
        _mm256_storeu_ps(x + j, v);
        vmx = _mm256_max_ps(vmx, v);
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, vmx);
    for (int k = 0; k < 8; k++) mx = tmp[k] > mx ? tmp[k] : mx;
#elif defined(RD_NEON)
    float32x4_t vs = vdupq_n_f32(scale), vmx = vdupq_n_f32(-INFINITY);
    for (; j + 4 <= n; j += 4) {
        float32x4_t v = vmulq_f32(vld1q_f32(x + j), vs);
        vst1q_f32(x + j, v);
        vmx = vmaxq_f32(vmx, v);
    }
    mx = vmaxvq_f32(vmx);
#endif
    for (; j < n; j++) {
        x[j] *= scale;
        if (x[j] > mx) mx = x[j];
    }
    float sum = 0;
    j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 vsum = _mm256_setzero_ps(), vm = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(x + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    sum = hsum256(vsum);
#elif defined(RD_NEON)
    float32x4_t vsum = vdupq_n_f32(0), vm = vdupq_n_f32(mx);
    for (; j + 4 <= n; j += 4) {
        float32x4_t e = exp_neg4(vsubq_f32(vld1q_f32(x + j), vm));
        vst1q_f32(x + j, e);
        vsum = vaddq_f32(vsum, e);
    }
    sum = vaddvq_f32(vsum);
#endif
    for (; j < n; j++) {
        float e = exp_neg(x[j] - mx);
        x[j] = e;
        sum += e;
    }
    *mo = mx;
    return sum;
}

void rd_softmax_rows(float *x, int n, int len, int ld, float scale, const int *valid) {
    for (int i = 0; i < n; i++) {
        float *row = x + (long)i * ld;
        int m = valid ? valid[i] : len;
        float mx, inv = 1.0f / exp_rows(row, m, scale, &mx);
        for (int j = 0; j < m; j++) row[j] *= inv;
        for (int j = m; j < len; j++) row[j] = 0;
    }
}

void rd_gelu(float *x, long n) {
    const float c = 0.7978845608028654f; // sqrt(2/pi)
    long i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 vc = _mm256_set1_ps(c), vk = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f),
                 half = _mm256_set1_ps(0.5f), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 u = _mm256_mul_ps(vc, _mm256_fmadd_ps(_mm256_mul_ps(vk, v), _mm256_mul_ps(v, v), v));
        __m256 a = _mm256_and_ps(u, absmask);
        __m256 e = exp_neg8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), a));
        __m256 th = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
        // Give th the sign of u.
        th = _mm256_or_ps(th, _mm256_andnot_ps(absmask, u));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, th)));
    }
#elif defined(RD_NEON)
    const float32x4_t vc = vdupq_n_f32(c), vk = vdupq_n_f32(0.044715f), one = vdupq_n_f32(1.0f), half = vdupq_n_f32(0.5f);
    const uint32x4_t signbit = vdupq_n_u32(0x80000000u);
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        float32x4_t u = vmulq_f32(vc, vfmaq_f32(v, vmulq_f32(vk, v), vmulq_f32(v, v)));
        float32x4_t e = exp_neg4(vmulq_f32(vdupq_n_f32(-2.0f), vabsq_f32(u)));
        float32x4_t th = vdivq_f32(vsubq_f32(one, e), vaddq_f32(one, e));
        // Give th the sign of u.
        th = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(th), vandq_u32(vreinterpretq_u32_f32(u), signbit)));
        vst1q_f32(x + i, vmulq_f32(vmulq_f32(half, v), vaddq_f32(one, th)));
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        float u = c * (v + 0.044715f * v * v * v);
        // tanh(u) = 1 - 2/(exp(2u)+1), computed from exp of a non-positive value.
        float a = fabsf(u);
        float e = exp_neg(-2.0f * a);
        float th = (1.0f - e) / (1.0f + e);
        th = u < 0 ? -th : th;
        x[i] = 0.5f * v * (1.0f + th);
    }
}

// axpy: y += a·x over n values.
static inline void axpy(float *y, float a, const float *x, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#elif defined(RD_NEON)
    float32x4_t va = vdupq_n_f32(a);
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
#endif
    for (; i < n; i++) y[i] += a * x[i];
}

// axpy_f16: y += a·x over n halves.
static inline void axpy_f16(float *y, float a, const uint16_t *x, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))), _mm256_loadu_ps(y + i)));
#elif defined(RD_NEON)
    float32x4_t va = vdupq_n_f32(a);
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vcvt_f32_f16(vld1_f16((const __fp16 *)(x + i)))));
#endif
    for (; i < n; i++) y[i] += a * h2f(x[i]);
}

// The attention kernels read K and V row by row, in memory order, for all
// heads at once: reading them head by head across rows streamed at half
// the rate, and threads that split the heads of each row between them
// each pulled whole rows through the cache (the hardware prefetchers fetch
// the neighbouring lines), which made two threads slower than one. So
// threads split the rows: each computes a softmax over its rows alone, and
// rd_attention_merge combines them (as flash-decoding does).
void rd_attention_part(const float *q, const void *K, const void *V, int es, int n, const int *valid, int d, int hd,
                       int p, int parts, float scale, float *scores, int ldScores, float *m, float *l, float *o) {
    const int nh = d / hd;
    for (int t = 0; t < n; t++) {
        const float *qt = q + (long)t * d;
        // The parts split the ldScores rows the same way for every query,
        // so that no two parts ever write the same column of scores; a
        // query that sees fewer rows leaves the last parts empty.
        const int L = ldScores, j0 = (int)((long)p * L / parts);
        int j1 = (int)((long)(p + 1) * L / parts);
        if (j1 > valid[t]) j1 = valid[t];
        float *mt = m + ((long)t * parts + p) * nh, *lt = l + ((long)t * parts + p) * nh;
        float *ot = o + ((long)t * parts + p) * d;
        memset(ot, 0, sizeof(float) * d);
        if (j0 >= j1) {
            for (int h = 0; h < nh; h++) mt[h] = -INFINITY, lt[h] = 0;
            continue;
        }
        for (int j = j0; j < j1; j++) {
            const char *kj = (const char *)K + (long)j * d * es;
            for (int h = 0; h < nh; h++) {
                const char *kh = kj + (long)h * hd * es;
                scores[(long)h * ldScores + j] =
                    es == 2 ? dot_f16((const uint8_t *)kh, qt + h * hd, hd) : dot(qt + h * hd, (const float *)kh, hd);
            }
        }
        for (int h = 0; h < nh; h++) lt[h] = exp_rows(scores + (long)h * ldScores + j0, j1 - j0, scale, mt + h);
        for (int j = j0; j < j1; j++) {
            const char *vj = (const char *)V + (long)j * d * es;
            for (int h = 0; h < nh; h++) {
                const char *vh = vj + (long)h * hd * es;
                float a = scores[(long)h * ldScores + j];
                if (es == 2)
                    axpy_f16(ot + h * hd, a, (const uint16_t *)vh, hd);
                else
                    axpy(ot + h * hd, a, (const float *)vh, hd);
            }
        }
    }
}

void rd_attention_merge(int n, int parts, int d, int hd, const float *m, const float *l, const float *o, float *out) {
    const int nh = d / hd;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < nh; h++) {
            float mx = -INFINITY;
            for (int p = 0; p < parts; p++) {
                float v = m[((long)t * parts + p) * nh + h];
                if (v > mx) mx = v;
            }
            float *oh = out + (long)t * d + h * hd;
            memset(oh, 0, sizeof(float) * hd);
            float sum = 0;
            for (int p = 0; p < parts; p++) {
                long i = ((long)t * parts + p) * nh + h;
                if (l[i] == 0) continue;
                float w = exp_neg(m[i] - mx);
                sum += w * l[i];
                axpy(oh, w, o + ((long)t * parts + p) * d + h * hd, hd);
            }
            float inv = 1.0f / sum;
            for (int e = 0; e < hd; e++) oh[e] *= inv;
        }
    }
}

static inline uint16_t f2h(float f) {
#ifdef __F16C__
    return _cvtss_sh(f, 0); // round to nearest even
#elif defined(RD_NEON)
    __fp16 v = (__fp16)f; // round to nearest even (FPCR's default)
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
#else
    uint32_t b;
    memcpy(&b, &f, 4);
    uint16_t sign = (b >> 16) & 0x8000;
    int exp = (int)((b >> 23) & 0xff) - 127;
    uint32_t man = b & 0x7fffff;
    if (exp == 128) return sign | (man ? 0x7e00 : 0x7c00);
    if (exp > 15) return sign | 0x7c00;
    if (exp >= -14) {
        uint32_t h = ((uint32_t)(exp + 15) << 10) | (man >> 13), rest = man & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
        return sign | (uint16_t)h;
    }
    if (exp >= -25) {
        uint32_t m = man | 0x800000, shift = (uint32_t)(-exp - 14 + 13);
        uint32_t h = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (h & 1))) h++;
        return sign | (uint16_t)h;
    }
    return sign;
#endif
}

void rd_f32_to_f16(const float *src, uint16_t *dst, long n) {
    long i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(RD_NEON)
    for (; i + 4 <= n; i += 4) vst1_f16((__fp16 *)(dst + i), vcvt_f16_f32(vld1q_f32(src + i)));
#endif
    for (; i < n; i++) dst[i] = f2h(src[i]);
}

double rd_sum_exp(const float *x, int n, float mx) {
    int i = 0;
    double sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 vm = _mm256_set1_ps(mx);
    for (; i + 64 <= n; i += 64) {
        __m256 acc = _mm256_setzero_ps();
        for (int k = 0; k < 64; k += 8) acc = _mm256_add_ps(acc, exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(x + i + k), vm)));
        sum += hsum256(acc);
    }
#elif defined(RD_NEON)
    float32x4_t vm = vdupq_n_f32(mx);
    for (; i + 64 <= n; i += 64) {
        float32x4_t acc = vdupq_n_f32(0);
        for (int k = 0; k < 64; k += 4) acc = vaddq_f32(acc, exp_neg4(vsubq_f32(vld1q_f32(x + i + k), vm)));
        sum += vaddvq_f32(acc);
    }
#endif
    for (; i < n; i++) sum += exp_neg(x[i] - mx);
    return sum;
}

// ---- int8 copy of the output projection (see shadow.go) ----

#if defined(__AVX2__) && defined(__FMA__)
static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

// shadow_row_avx2 is one row of rd_shadow_build for cols a multiple of 32.
// It works in float: the error is rounded up by the float rounding of
// scale·q and of the difference, so it stays a bound.
static int shadow_row_avx2(const float *row, int cols, int8_t *qr, float *scale, float *err, float *l1) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), inf = _mm256_set1_ps(INFINITY);
    __m256 vmx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < cols; i += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(row + i), absmask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); // Inf or NaN
        vmx = _mm256_max_ps(vmx, a);
    }
    if (_mm256_movemask_ps(bad)) return 0;
    float s = hmax256(vmx) / 127.0f;
    const __m256 vs = _mm256_set1_ps(s), vinv = _mm256_set1_ps(s > 0 ? 1.0f / s : 0.0f);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 ve = _mm256_setzero_ps();
    __m256i vn1 = _mm256_setzero_si256();
    for (int i = 0; i < cols; i += 32) {
        __m256i qk[4];
        for (int k = 0; k < 4; k++) {
            __m256 w = _mm256_loadu_ps(row + i + 8 * k);
            __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(w, vinv)); // to nearest, ties to even
            v = _mm256_min_epi32(_mm256_max_epi32(v, nlim), lim);
            ve = _mm256_max_ps(ve, _mm256_and_ps(_mm256_sub_ps(w, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(v))), absmask));
            vn1 = _mm256_add_epi32(vn1, _mm256_abs_epi32(v));
            qk[k] = v;
        }
        __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(qk[0], qk[1]), _mm256_packs_epi32(qk[2], qk[3]));
        _mm256_storeu_si256((__m256i *)(qr + i), _mm256_permutevar8x32_epi32(b, perm));
    }
    int32_t n[8];
    _mm256_storeu_si256((__m256i *)n, vn1);
    long sum = 0;
    for (int k = 0; k < 8; k++) sum += n[k];
    *scale = s;
    *err = hmax256(ve) * (1 + 0x1p-22f) + 127.0f * s * 0x1p-23f + 1e-30f;
    *l1 = (float)((double)s * (double)sum * (1 + 1e-6));
    return 1;
}
#endif

int rd_shadow_build(int typ, const uint8_t *W, long rowBytes, int cols, int r0, int r1, int8_t *q, float *scale,
                    float *err, float *l1, float *tmp) {
    for (int r = r0; r < r1; r++) {
        const float *row;
        if (typ == RD_F32) {
            row = (const float *)(W + (long)r * rowBytes);
        } else {
            rd_dequant(typ, W + (long)r * rowBytes, tmp, cols);
            row = tmp;
        }
        int8_t *qr = q + (long)r * cols;
#if defined(__AVX2__) && defined(__FMA__)
        if (cols % 32 == 0) {
            if (!shadow_row_avx2(row, cols, qr, scale + r, err + r, l1 + r)) return 0;
            continue;
        }
#endif
        float mx = 0;
        for (int i = 0; i < cols; i++) {
            if (!isfinite(row[i])) return 0;
            float a = fabsf(row[i]);
            if (a > mx) mx = a;
        }
        float s = mx / 127.0f;
        double e = 0, n1 = 0;
        for (int i = 0; i < cols; i++) {
            long v = s > 0 ? lrintf(row[i] / s) : 0;
            if (v > 127) v = 127;
            if (v < -127) v = -127;
            qr[i] = (int8_t)v;
            double w = (double)s * (double)v, d = fabs((double)row[i] - w);
            if (d > e) e = d;
            n1 += fabs(w);
        }
        scale[r] = s;
        // Rounded up, so that the bounds built on them stay bounds.
        err[r] = (float)(e * (1 + 1e-6)) + 1e-30f;
        l1[r] = (float)(n1 * (1 + 1e-6));
    }
    return 1;
}

void rd_shadow_gemv(const int8_t *Q, int cols, const int16_t *xq, float sx, float xn1, float ex, const float *scale,
                    const float *err, const float *l1, int r0, int r1, float *a, float *b) {
    const float slackK = (float)(cols + 256) * 0x1p-23f * (xn1 + (float)cols * ex);
    for (int r = r0; r < r1; r++) {
        const int8_t *qr = Q + (long)r * cols;
        int64_t acc = 0;
        int i = 0;
#ifdef __AVX2__
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        // Each 32-bit lane sums at most cols/8 products of |q| ≤ 127 and
        // |x| ≤ 32767: no overflow below 4096 columns; rows are summed in 64 bits.
        for (; i + 32 <= cols; i += 32) {
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qr + i))),
                                                        _mm256_loadu_si256((const __m256i *)(xq + i))));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qr + i + 16))),
                                                        _mm256_loadu_si256((const __m256i *)(xq + i + 16))));
        }
        __m256i lo = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s0)), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s0, 1)));
        __m256i hi = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s1)), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s1, 1)));
        __m256i t = _mm256_add_epi64(lo, hi);
        int64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, t);
        acc = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#elif defined(RD_NEON)
        // Each 32-bit lane sums four products of |q| ≤ 127 and |x| ≤ 32767
        // before it goes into the 64-bit sums.
        int64x2_t s64 = vdupq_n_s64(0);
        for (; i + 16 <= cols; i += 16) {
            int8x16_t q = vld1q_s8(qr + i);
            int16x8_t q0 = vmovl_s8(vget_low_s8(q)), q1 = vmovl_high_s8(q);
            int16x8_t x0 = vld1q_s16(xq + i), x1 = vld1q_s16(xq + i + 8);
            int32x4_t s = vmull_s16(vget_low_s16(q0), vget_low_s16(x0));
            s = vmlal_high_s16(s, q0, x0);
            s = vmlal_s16(s, vget_low_s16(q1), vget_low_s16(x1));
            s = vmlal_high_s16(s, q1, x1);
            s64 = vpadalq_s32(s64, s);
        }
        acc = vaddvq_s64(s64);
#endif
        for (; i < cols; i++) acc += (int32_t)qr[i] * (int32_t)xq[i];
        float s = scale[r];
        a[r] = (float)((double)acc * (double)s * (double)sx);
        b[r] = err[r] * xn1 + l1[r] * ex + slackK * (127.0f * s + err[r]);
    }
}

void rd_gemv_idx(int typ, const uint8_t *W, long rowBytes, const float *x, int cols, const int32_t *idx, int n,
                 float *y, float *tmp) {
    // The same dot products as rd_gemv_rows with one token, so the values
    // are bit for bit the same.
    for (int k = 0; k < n; k++) {
        const uint8_t *src = W + (long)idx[k] * rowBytes;
#ifdef HAVE_DOT_F16
        if (typ == RD_F16) {
            y[k] = dot_f16(src, x, cols);
            continue;
        }
#endif
        y[k] = dot(row_f32(typ, src, cols, tmp), x, cols);
    }
}

// ---- products of quantised weights with q8_0-quantised activations ----
//
// ggml's way: the activation row is quantised once to 32-value blocks of
// int8 with one scale each (q8_0), and each weight block's product with it
// is an integer dot product, scaled by both blocks' scales.

static inline int block_bytes(int typ) {
    switch (typ) {
    case RD_Q8_0: return 34;
    case RD_Q4_0: return 18;
    case RD_Q4_1: return 20;
    case RD_Q5_0: return 22;
    case RD_Q5_1: return 24;
    }
    return 0;
}

void rd_quantize_q8(const float *x, long n, int8_t *q, float *d, float *s) {
    for (long b = 0; b < n / 32; b++, x += 32, q += 32) {
        float amax = 0;
        long i = 0;
#ifdef __AVX2__
        const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 m = _mm256_setzero_ps();
        for (; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        amax = _mm_cvtss_f32(m4);
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        int qsum = _mm_cvtsi128_si32(s4);
#else
        for (; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        int qsum = 0;
        for (i = 0; i < 32; i++) {
            q[i] = (int8_t)lrintf(x[i] * id); // to nearest, ties to even
            qsum += q[i];
        }
#endif
        // The scale as ggml stores it: rounded to half precision.
        d[b] = h2f(f2h(amax / 127.0f));
        s[b] = d[b] * (float)qsum;
    }
}

// unpack_block writes block src of type typ as 32 integers q, with x = d·q
// (+ m for Q4_1 and Q5_1).
static inline void unpack_block(int typ, const uint8_t *src, int8_t *q, float *d, float *m) {
    *d = h2f(ld16(src));
    *m = 0;
    switch (typ) {
    case RD_Q8_0:
        memcpy(q, src + 2, 32);
        return;
    case RD_Q4_0:
    case RD_Q4_1: {
        const uint8_t *qs = src + (typ == RD_Q4_0 ? 2 : 4);
        int off = typ == RD_Q4_0 ? 8 : 0;
        if (typ == RD_Q4_1) *m = h2f(ld16(src + 2));
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 15) - off);
            q[j + 16] = (int8_t)((qs[j] >> 4) - off);
        }
        return;
    }
    case RD_Q5_0:
    case RD_Q5_1: {
        int h = typ == RD_Q5_0 ? 2 : 4, off = typ == RD_Q5_0 ? 16 : 0;
        if (typ == RD_Q5_1) *m = h2f(ld16(src + 2));
        uint32_t qh = ld32(src + h);
        const uint8_t *qs = src + h + 4;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(((qs[j] & 15) | (((qh >> j) & 1) << 4)) - off);
            q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off);
        }
        return;
    }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
// nibbles32 spreads 16 bytes of nibbles to 32 bytes: the low nibbles first.
static inline __m256i nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(15));
}

// bits32 turns the 32 bits at p into 32 bytes of 0xFF (bit set) or 0.
static inline __m256i bits32(const uint8_t *p) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)ld32(p)), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

// unpack32 is unpack_block's integers in one register: signed for Q8_0,
// Q4_0 and Q5_0, unsigned (0..31) for Q4_1 and Q5_1.
static inline __m256i unpack32(int typ, const uint8_t *b) {
    switch (typ) {
    case RD_Q4_0: return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    case RD_Q4_1: return nibbles32(b + 4);
    case RD_Q5_0: return _mm256_or_si256(nibbles32(b + 6), _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0)));
    case RD_Q5_1: return _mm256_or_si256(nibbles32(b + 8), _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(0x10)));
    default: return _mm256_loadu_si256((const __m256i *)(b + 2));
    }
}

// sum_pairs returns the eight sums of four neighbouring products a[i]·x[i]
// as floats; a is signed, or unsigned when typ has an offset. No int16
// saturates: |a|, |x| ≤ 127 after the sign trick (a = -128 is 128·|x| ≤
// 16256 per product), and unsigned a ≤ 31.
static inline __m256 sum_pairs(int typ, __m256i a, __m256i x) {
    __m256i p;
    if (typ == RD_Q4_1 || typ == RD_Q5_1) {
        p = _mm256_maddubs_epi16(a, x);
    } else {
        p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(x, a));
    }
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

// dotq is one row's product with one quantised activation row; inlined
// with a constant typ, it becomes one loop per type.
static inline __attribute__((always_inline)) float dotq(int typ, const uint8_t *w, const int8_t *xq, const float *xd,
                                                        const float *xs, int nb) {
    const int bs = block_bytes(typ);
    const int offset = typ == RD_Q4_1 || typ == RD_Q5_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float accm = 0;
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *b0 = w + (long)b * bs, *b1 = b0 + bs;
        __m256 p0 = sum_pairs(typ, unpack32(typ, b0), _mm256_loadu_si256((const __m256i *)(xq + 32 * b)));
        __m256 p1 = sum_pairs(typ, unpack32(typ, b1), _mm256_loadu_si256((const __m256i *)(xq + 32 * b + 32)));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld16(b0)) * xd[b]), p0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld16(b1)) * xd[b + 1]), p1, acc1);
        if (offset) accm += h2f(ld16(b0 + 2)) * xs[b] + h2f(ld16(b1 + 2)) * xs[b + 1];
    }
    for (; b < nb; b++) {
        const uint8_t *b0 = w + (long)b * bs;
        __m256 p0 = sum_pairs(typ, unpack32(typ, b0), _mm256_loadu_si256((const __m256i *)(xq + 32 * b)));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld16(b0)) * xd[b]), p0, acc0);
        if (offset) accm += h2f(ld16(b0 + 2)) * xs[b];
    }
    return hsum256(_mm256_add_ps(acc0, acc1)) + accm;
}

static void gemvq_rows(int typ, const uint8_t *W, long rowBytes, const int8_t *xq, const float *xd, const float *xs,
                       int n, int cols, float *y, int ldy, int r0, int r1) {
    const int nb = cols / 32;
    for (int r = r0; r < r1; r++) {
        const uint8_t *src = W + (long)r * rowBytes;
        for (int t = 0; t < n; t++)
            y[(long)t * ldy + r] = dotq(typ, src, xq + (long)t * cols, xd + (long)t * nb, xs + (long)t * nb, nb);
    }
}
#endif

#ifdef RD_NEON
// dot32 is the integer dot product of 32 signed bytes.
static inline int32_t dot32(const int8_t *a, const int8_t *x) {
    int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16), x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#ifdef __ARM_FEATURE_DOTPROD
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), a0, x0), a1, x1));
#else
    // Two products of |a| ≤ 128 and |x| ≤ 127 fit an int16 lane.
    int32x4_t s = vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(a0), vget_low_s8(x0)), a0, x0));
    s = vpadalq_s16(s, vmlal_high_s8(vmull_s8(vget_low_s8(a1), vget_low_s8(x1)), a1, x1));
    return vaddvq_s32(s);
#endif
}

// dotq_neon is dotq_scalar with the integer products in NEON (and the
// same float arithmetic, so the same result).
static inline __attribute__((always_inline)) float dotq_neon(int typ, const uint8_t *w, const int8_t *xq,
                                                             const float *xd, const float *xs, int nb) {
    const int bs = block_bytes(typ);
    float acc = 0;
    int8_t q[32];
    for (int b = 0; b < nb; b++) {
        const uint8_t *src = w + (long)b * bs;
        float d, m;
        const int8_t *qb = q;
        if (typ == RD_Q8_0) {
            d = h2f(ld16(src)), m = 0, qb = (const int8_t *)(src + 2);
        } else {
            unpack_block(typ, src, q, &d, &m);
        }
        acc += d * xd[b] * (float)dot32(qb, xq + 32 * b) + m * xs[b];
    }
    return acc;
}

static void gemvq_rows_neon(int typ, const uint8_t *W, long rowBytes, const int8_t *xq, const float *xd,
                            const float *xs, int n, int cols, float *y, int ldy, int r0, int r1) {
    const int nb = cols / 32;
    for (int r = r0; r < r1; r++) {
        const uint8_t *src = W + (long)r * rowBytes;
        for (int t = 0; t < n; t++)
            y[(long)t * ldy + r] = dotq_neon(typ, src, xq + (long)t * cols, xd + (long)t * nb, xs + (long)t * nb, nb);
    }
}
#endif

// dotq_scalar is dotq without SIMD, for builds without AVX2 or NEON.
static float dotq_scalar(int typ, const uint8_t *w, const int8_t *xq, const float *xd, const float *xs, int nb) {
    const int bs = block_bytes(typ);
    float acc = 0;
    int8_t q[32];
    for (int b = 0; b < nb; b++) {
        float d, m;
        unpack_block(typ, w + (long)b * bs, q, &d, &m);
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += (int32_t)q[j] * (int32_t)xq[32 * b + j];
        acc += d * xd[b] * (float)s + m * xs[b];
    }
    return acc;
}

void rd_gemvq_rows(int typ, const uint8_t *W, long rowBytes, const int8_t *xq, const float *xd, const float *xs, int n,
                   int cols, float *y, int ldy, int r0, int r1) {
#if defined(__AVX2__) && defined(__FMA__)
    // One call per type, so that each gets its own loop.
    switch (typ) {
    case RD_Q8_0: gemvq_rows(RD_Q8_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q4_0: gemvq_rows(RD_Q4_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q4_1: gemvq_rows(RD_Q4_1, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q5_0: gemvq_rows(RD_Q5_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q5_1: gemvq_rows(RD_Q5_1, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    }
#elif defined(RD_NEON)
    switch (typ) {
    case RD_Q8_0: gemvq_rows_neon(RD_Q8_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q4_0: gemvq_rows_neon(RD_Q4_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q4_1: gemvq_rows_neon(RD_Q4_1, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q5_0: gemvq_rows_neon(RD_Q5_0, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    case RD_Q5_1: gemvq_rows_neon(RD_Q5_1, W, rowBytes, xq, xd, xs, n, cols, y, ldy, r0, r1); return;
    }
#endif
    const int nb = cols / 32;
    for (int r = r0; r < r1; r++)
        for (int t = 0; t < n; t++)
            y[(long)t * ldy + r] =
                dotq_scalar(typ, W + (long)r * rowBytes, xq + (long)t * cols, xd + (long)t * nb, xs + (long)t * nb, nb);
}

// max_of returns the highest of x[0..n), ignoring NaNs; -Inf when there is
// none.
static float max_of(const float *x, int n) {
    float m = -INFINITY;
    int i = 0;
#ifdef __AVX2__
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    // max_ps returns its second operand when either is NaN: the running max.
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    m = _mm_cvtss_f32(h);
#endif
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

void rd_top2(const float *x, int n, int *best, float *top, float *runner) {
    float m = max_of(x, n);
    int b = -1, i = 0;
#ifdef __AVX2__
    const __m256 vm = _mm256_set1_ps(m);
    for (; i + 8 <= n; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (mask) {
            b = i + __builtin_ctz(mask);
            break;
        }
    }
#endif
    for (; b < 0 && i < n; i++)
        if (x[i] == m) b = i;
    if (b < 0) { // only NaNs
        *best = 0, *top = x[0], *runner = -INFINITY;
        return;
    }
    float r0 = max_of(x, b), r1 = max_of(x + b + 1, n - b - 1);
    *best = b, *top = m, *runner = r0 > r1 ? r0 : r1;
}

int rd_shadow_candidates(const float *a, const float *b, int n, int32_t *cand, int maxc) {
    // The two highest lower ends a-b (NaN counts as -Inf).
    float l1 = -INFINITY, l2 = -INFINITY;
    int i = 0;
#ifdef __AVX2__
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 v1 = ninf, v2 = ninf;
    for (; i + 8 <= n; i += 8) {
        __m256 lo = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        lo = _mm256_blendv_ps(ninf, lo, _mm256_cmp_ps(lo, lo, _CMP_ORD_Q));
        v2 = _mm256_max_ps(v2, _mm256_min_ps(v1, lo));
        v1 = _mm256_max_ps(v1, lo);
    }
    float t1[8], t2[8];
    _mm256_storeu_ps(t1, v1);
    _mm256_storeu_ps(t2, v2);
    for (int k = 0; k < 16; k++) {
        float lo = k < 8 ? t1[k] : t2[k - 8];
        if (lo > l2) {
            if (lo > l1) l2 = l1, l1 = lo;
            else l2 = lo;
        }
    }
#endif
    for (; i < n; i++) {
        float lo = a[i] - b[i];
        if (lo > l2) {
            if (lo > l1) l2 = l1, l1 = lo;
            else l2 = lo;
        }
    }
    // The rows whose upper end a+b reaches l2.
    int c = 0;
    i = 0;
#ifdef __AVX2__
    const __m256 vl2 = _mm256_set1_ps(l2);
    for (; i + 8 <= n; i += 8) {
        __m256 va = _mm256_loadu_ps(a + i);
        __m256 hit = _mm256_and_ps(_mm256_cmp_ps(_mm256_add_ps(va, _mm256_loadu_ps(b + i)), vl2, _CMP_GE_OQ),
                                   _mm256_cmp_ps(va, ninf, _CMP_NEQ_OQ));
        for (int mask = _mm256_movemask_ps(hit); mask; mask &= mask - 1) {
            if (c == maxc) return maxc + 1;
            cand[c++] = i + __builtin_ctz(mask);
        }
    }
#endif
    for (; i < n; i++) {
        if (a[i] + b[i] >= l2 && a[i] != -INFINITY) {
            if (c == maxc) return maxc + 1;
            cand[c++] = i;
        }
    }
    return c;
}
