// Numeric kernels of engine/whisper: weight dequantisation, small-batch
// matrix products on compact weights, and the element-wise functions the
// network needs. Matrix products with many rows go to OpenBLAS instead.
#ifndef REPLYD_WHISPER_KERNELS_H
#define REPLYD_WHISPER_KERNELS_H
#include <stdint.h>

// Weight types, numbered as ggml numbers them.
enum { RD_F32 = 0, RD_F16 = 1, RD_Q4_0 = 2, RD_Q4_1 = 3, RD_Q5_0 = 6, RD_Q5_1 = 7, RD_Q8_0 = 8 };

// rd_dequant writes the n values (a multiple of 32 for quantised types) that
// start at src to dst as float32.
void rd_dequant(int typ, const uint8_t *src, float *dst, long n);

// rd_gemv_rows computes y[t*ldy + r] = dot(row r of W, x[t*cols ..]) for
// rows r in [r0, r1) and tokens t in [0, n). W holds rows of cols values of
// type typ, rowBytes bytes each. tmp must hold cols floats.
void rd_gemv_rows(int typ, const uint8_t *W, long rowBytes, const float *x, int n, int cols,
                  float *y, int ldy, int r0, int r1, float *tmp);

// rd_softmax_rows replaces each of the n rows of length len (stride ld) by
// its softmax after scaling by scale; entries past valid[i] (when valid is
// not NULL) are set to 0.
void rd_softmax_rows(float *x, int n, int len, int ld, float scale, const int *valid);

// rd_attention_part computes part p of parts of the attention of the n
// queries of q ([n][d], heads of width hd) over K and V ([rows][d], float32
// when es is 4, IEEE halves when es is 2): query t's part covers the rows
// of [p·ldScores/parts, (p+1)·ldScores/parts) below valid[t] (ldScores is
// the rows of K and V; the same split for every query). Per head h it writes the highest
// scaled score m, l = Σ exp(score - m) and o = Σ exp(score - m)·V[j][h] to
// m[(t·parts+p)·nh + h], l[same] and o[(t·parts+p)·d + h·hd ...]. scores
// holds nh rows of ldScores floats; a part writes only its own columns, so
// the parts of one call may run at the same time.
void rd_attention_part(const float *q, const void *K, const void *V, int es, int n, const int *valid, int d, int hd,
                       int p, int parts, float scale, float *scores, int ldScores, float *m, float *l, float *o);

// rd_attention_merge writes to out ([n][d]) softmax(scale·q·Kᵀ)·V from the
// parts of rd_attention_part.
void rd_attention_merge(int n, int parts, int d, int hd, const float *m, const float *l, const float *o, float *out);

// rd_f32_to_f16 rounds n floats to IEEE halves (to nearest, ties to even).
void rd_f32_to_f16(const float *src, uint16_t *dst, long n);

// rd_sum_exp returns the sum of exp(x[i] - mx) for i < n; every x[i] must
// be at most mx.
double rd_sum_exp(const float *x, int n, float mx);

// rd_gelu applies the tanh approximation of GELU to n values in place.
void rd_gelu(float *x, long n);

// rd_f16_to_f32 converts n IEEE half-precision values to float32.
void rd_f16_to_f32(const uint16_t *src, float *dst, long n);

// rd_shadow_build fills rows r0..r1-1 of an int8 copy of W (rows of cols
// values of type typ, rowBytes bytes each): q = round(w/scale) with
// scale = max|w|/127, err = max|w - scale·q| and l1 = Σ|scale·q| per row,
// both rounded up. tmp holds cols floats. It returns 0 when a row holds a
// value that is not finite.
int rd_shadow_build(int typ, const uint8_t *W, long rowBytes, int cols, int r0, int r1, int8_t *q, float *scale,
                    float *err, float *l1, float *tmp);

// rd_shadow_gemv computes, for rows r0..r1-1 of the int8 copy Q, the
// approximate product a[r] = scale[r]·sx·Σ q·xq and a bound b[r] on its
// distance from the F16/F32 product that rd_gemv_rows computes for x, where
// x ≈ sx·xq, xn1 = Σ|x| and ex = max|x - sx·xq|.
void rd_shadow_gemv(const int8_t *Q, int cols, const int16_t *xq, float sx, float xn1, float ex, const float *scale,
                    const float *err, const float *l1, int r0, int r1, float *a, float *b);

// rd_gemv_idx computes y[k] = dot(row idx[k] of W, x) for k < n, bit for bit
// as rd_gemv_rows does for one token. tmp holds cols floats.
void rd_gemv_idx(int typ, const uint8_t *W, long rowBytes, const float *x, int cols, const int32_t *idx, int n,
                 float *y, float *tmp);

// rd_shadow_candidates writes to cand, in ascending order, the rows i of
// the approximate logits a (bounds b) that can hold the best or the
// runner-up: those whose a+b reaches the second-highest a-b, less those
// with a = -Inf. It returns their count, or maxc+1 when there are more
// than maxc.
int rd_shadow_candidates(const float *a, const float *b, int n, int32_t *cand, int maxc);

// rd_top2 finds greedy decoding's pick among x[0..n) (n ≥ 1): the highest
// value (NaNs are never picked), its index (the lowest on ties) and the
// highest of the other values.
void rd_top2(const float *x, int n, int *best, float *top, float *runner);

// rd_quantize_q8 quantises n values of x (a multiple of 32) to ggml's q8_0
// blocks as its quantize_row_q8_0 does: per block of 32, the scale d =
// max|x|/127 rounded to half precision, q = x·127/max|x| rounded to the
// nearest integer (ties to even). It writes the int8 values to q, the scales
// (as float) to d and d·Σq per block to s.
void rd_quantize_q8(const float *x, long n, int8_t *q, float *d, float *s);

// rd_gemvq_rows is rd_gemv_rows for quantised weights (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1) and activations quantised by rd_quantize_q8: token t's row is
// xq[t*cols ..] with scales xd[t*cols/32 ..] and sums xs[t*cols/32 ..]. Each
// block's product is an integer dot product times both scales, as ggml
// computes it.
void rd_gemvq_rows(int typ, const uint8_t *W, long rowBytes, const int8_t *xq, const float *xd, const float *xs, int n,
                   int cols, float *y, int ldy, int r0, int r1);
#endif
