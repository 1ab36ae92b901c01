// Whisper's encoder and decoder as ggml graphs. The shapes and the order of
// the operations follow whisper.cpp's whisper_build_graph_conv,
// whisper_build_graph_encoder, whisper_build_graph_cross and
// whisper_build_graph_decoder (non-flash-attention branch: K·Q, scale,
// causal mask, softmax, V·softmax with V stored transposed), written here
// against the ggml that the ollama module vendors. Differences: the
// convolutions unfold to F32 (ggml_im2col) rather than F16, the scale is
// applied inside the softmax, and the logits are a graph of their own
// (rdg_logits: the rows of the token embedding asked for, times one hidden
// state), so that the Go side's rules get exactly the logits they ask for
// and only those cross back from the backend.
#include "graph.h"

#include <math.h>
#include <stdlib.h>

#define RDG_MAX_NODES 4096

static struct ggml_context *rdg_ctx(rdg_model *m) {
    size_t need = ggml_tensor_overhead() * RDG_MAX_NODES + ggml_graph_overhead_custom(RDG_MAX_NODES, false);
    if (m->meta_size < need) {
        free(m->meta);
        m->meta = malloc(need);
        m->meta_size = m->meta ? need : 0;
        if (!m->meta) return NULL;
    }
    struct ggml_init_params p = {m->meta_size, m->meta, true};
    return ggml_init(p);
}

// rdg_fail_countdown is a test hook (graph_test.go): when it is n > 0, the
// n-th allocation from here on (weights, graph reservation, a graph's
// allocation) fails as ggml's would, returning NULL or false. 0 (always,
// outside those tests) leaves every allocation to ggml.
int rdg_fail_countdown = 0;

static int rdg_fail_now(void) { return rdg_fail_countdown > 0 && --rdg_fail_countdown == 0; }

struct ggml_backend_buffer *rdg_alloc_tensors(struct ggml_context *ctx, struct ggml_backend *backend) {
    if (rdg_fail_now()) return NULL;
    return ggml_backend_alloc_ctx_tensors(ctx, backend);
}

static bool rdg_alloc_graph(struct ggml_gallocr *alloc, struct ggml_cgraph *gf) {
    if (rdg_fail_now()) return false;
    return ggml_gallocr_alloc_graph(alloc, gf);
}

static int rdg_run(rdg_model *m, struct ggml_context *ctx, struct ggml_cgraph *gf) {
    (void)ctx;
    if (!rdg_alloc_graph(m->alloc, gf)) return -1;
    return ggml_backend_graph_compute(m->backend, gf);
}

// layer norm with whisper's epsilon (1e-5), then ·w + b
static struct ggml_tensor *rdg_ln(struct ggml_context *ctx, struct ggml_tensor *x, struct ggml_tensor *w,
                                  struct ggml_tensor *b) {
    return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, 1e-5f), w), b);
}

static struct ggml_tensor *rdg_lin(struct ggml_context *ctx, struct ggml_tensor *x, struct ggml_tensor *w,
                                   struct ggml_tensor *b) {
    struct ggml_tensor *y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

int rdg_encoder_steps(const rdg_model *m) { return m->n_audio_layer + 2; }

// rdg_conv computes GELU(conv1d(x, w) + b) with kernel 3, padding 1: x is
// [c_in][L] (ne0 = L), w [c_out][c_in][3], the result [L_out][c_out]
// (ne0 = c_out).
static struct ggml_tensor *rdg_conv(struct ggml_context *ctx, struct ggml_tensor *w, struct ggml_tensor *b,
                                    struct ggml_tensor *x, int c_in, int c_out, int stride) {
    struct ggml_tensor *col = ggml_im2col(ctx, w, x, stride, 0, 1, 0, 1, 0, false, RDG_F32); // [L_out][c_in·3]
    struct ggml_tensor *y = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, w, 3 * (int64_t)c_in, c_out), col);
    return ggml_gelu(ctx, ggml_add(ctx, y, b));
}

// rdg_attend is multi-head attention of q ([n][d]) over k ([L][d]) and v
// (transposed: [nh][hd][L] as a view), scale applied in the softmax; with
// causal, query i sees past+i+1 keys.
static struct ggml_tensor *rdg_attend(struct ggml_context *ctx, struct ggml_tensor *q, struct ggml_tensor *k,
                                      struct ggml_tensor *vt, int n, int L, int d, int nh, int causal, int past) {
    int hd = d / nh;
    struct ggml_tensor *Q = ggml_permute(ctx, ggml_reshape_3d(ctx, q, hd, nh, n), 0, 2, 1, 3); // [nh][n][hd]
    struct ggml_tensor *K = ggml_permute(ctx, k, 0, 2, 1, 3);                                   // [nh][L][hd]
    struct ggml_tensor *KQ = ggml_mul_mat(ctx, K, Q);                                           // [nh][n][L]
    float scale = 1.0f / sqrtf((float)hd);
    if (causal) {
        KQ = ggml_diag_mask_inf(ctx, ggml_scale(ctx, KQ, scale), past);
        scale = 1.0f;
    }
    KQ = ggml_soft_max_ext(ctx, KQ, NULL, scale, 0.0f);
    struct ggml_tensor *KQV = ggml_mul_mat(ctx, vt, KQ); // [nh][n][hd]
    KQV = ggml_permute(ctx, KQV, 0, 2, 1, 3);            // [n][nh][hd]
    (void)L;
    return ggml_reshape_2d(ctx, ggml_cont(ctx, KQV), d, n);
}

// rdg_build_encoder builds encoder step `step` over the window's m->n_ctx
// positions (whisper.cpp's audio_ctx; n_audio_ctx at most). The state
// tensors keep their full shapes; every graph reads and writes views of
// their first rows: the mel input's first 2·n_ctx frames (packed
// contiguously by the Go side), the positional embedding's rows
// 0..n_ctx-1, the running activations' first n_ctx rows. As in whisper.cpp
// (whisper_build_graph_conv with exp_n_audio_ctx), the convolutions pad
// with zeros at the edges of those frames and the attention runs over
// n_ctx positions.
static void rdg_build_encoder(rdg_model *m, struct ggml_context *ctx, struct ggml_cgraph *gf, int step) {
    int d = m->d_audio, T = m->n_ctx, nh = m->nh_audio;
    size_t f32 = ggml_row_size(RDG_F32, 1);
    struct ggml_tensor *x = ggml_view_2d(ctx, m->enc_x, d, T, d * f32, 0);
    struct ggml_tensor *out;
    if (step == 0) {
        struct ggml_tensor *mel = ggml_view_2d(ctx, m->mel, 2 * T, m->n_mels, 2 * (size_t)T * f32, 0);
        struct ggml_tensor *h = rdg_conv(ctx, m->conv1_w, m->conv1_b, mel, m->n_mels, d, 1); // [2T][d]
        h = ggml_cont(ctx, ggml_transpose(ctx, h));                                       // [d][2T]
        h = rdg_conv(ctx, m->conv2_w, m->conv2_b, h, d, d, 2);                            // [T][d]
        struct ggml_tensor *pos = ggml_view_2d(ctx, m->enc_pos, d, T, d * f32, 0);
        out = ggml_add(ctx, ggml_reshape_2d(ctx, h, d, T), pos);
    } else if (step <= m->n_audio_layer) {
        rdg_block *b = &m->enc[step - 1];
        struct ggml_tensor *h = rdg_ln(ctx, x, b->attn_ln_w, b->attn_ln_b);
        struct ggml_tensor *q = rdg_lin(ctx, h, b->q_w, b->q_b);
        struct ggml_tensor *k = ggml_reshape_3d(ctx, rdg_lin(ctx, h, b->k_w, NULL), d / nh, nh, T);
        struct ggml_tensor *v = rdg_lin(ctx, h, b->v_w, b->v_b);
        // V transposed to [nh][hd][T], as whisper.cpp's non-flash path has it.
        struct ggml_tensor *vt = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, v, d / nh, nh, T), 1, 2, 0, 3));
        struct ggml_tensor *a = rdg_attend(ctx, q, k, vt, T, T, d, nh, 0, 0);
        x = ggml_add(ctx, x, rdg_lin(ctx, a, b->o_w, b->o_b));
        h = rdg_ln(ctx, x, b->mlp_ln_w, b->mlp_ln_b);
        h = rdg_lin(ctx, ggml_gelu(ctx, rdg_lin(ctx, h, b->fc1_w, b->fc1_b)), b->fc2_w, b->fc2_b);
        out = ggml_add(ctx, x, h);
    } else {
        out = rdg_ln(ctx, x, m->enc_ln_w, m->enc_ln_b);
    }
    ggml_build_forward_expand(gf, ggml_cpy(ctx, out, ggml_view_2d(ctx, m->enc_x, d, T, d * f32, 0)));
}

int rdg_encoder_step(rdg_model *m, int step) {
    struct ggml_context *ctx = rdg_ctx(m);
    if (!ctx) return -1;
    struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, RDG_MAX_NODES, false);
    rdg_build_encoder(m, ctx, gf, step);
    int rc = rdg_run(m, ctx, gf);
    ggml_free(ctx);
    return rc;
}

// rdg_build_cross stores the cross K/V of the encoder's m->n_ctx output
// rows in the first rows of the caches: K as [n_ctx][d], V transposed,
// each of its d rows n_audio_ctx long (the stride the decoder reads with).
static void rdg_build_cross(rdg_model *m, struct ggml_context *ctx, struct ggml_cgraph *gf) {
    int T = m->n_ctx, d = m->d_text;
    size_t f16 = ggml_row_size(RDG_F16, 1), f32 = ggml_row_size(RDG_F32, 1);
    struct ggml_tensor *x = ggml_view_2d(ctx, m->enc_x, m->d_audio, T, m->d_audio * f32, 0);
    for (int l = 0; l < m->n_text_layer; l++) {
        rdg_block *b = &m->dec[l];
        struct ggml_tensor *kc = ggml_view_2d(ctx, m->k_cross[l], d, T, d * f16, 0);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, rdg_lin(ctx, x, b->ck_w, NULL), kc));
        struct ggml_tensor *v = rdg_lin(ctx, x, b->cv_w, b->cv_b); // [T][d]
        struct ggml_tensor *vc = ggml_view_2d(ctx, m->v_cross[l], T, d, m->n_audio_ctx * f16, 0);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_transpose(ctx, v), vc));
    }
}

int rdg_cross(rdg_model *m) {
    struct ggml_context *ctx = rdg_ctx(m);
    if (!ctx) return -1;
    struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, RDG_MAX_NODES, false);
    rdg_build_cross(m, ctx, gf);
    int rc = rdg_run(m, ctx, gf);
    ggml_free(ctx);
    return rc;
}

// rdg_build_decode builds the decoder's graph for n tokens at positions
// past.., its cross-attention over the first T rows of the cross K/V;
// *tok is its input, *x its output ([n][d_text]).
static void rdg_build_decode(rdg_model *m, struct ggml_context *ctx, struct ggml_cgraph *gf, int n, int past, int T,
                             struct ggml_tensor **tok_out, struct ggml_tensor **x_out) {
    int d = m->d_text, nh = m->nh_text, hd = d / nh, A = m->n_audio_ctx, C = m->n_text_ctx;
    int L = past + n;
    struct ggml_tensor *tok = ggml_new_tensor_1d(ctx, RDG_I32, n);
    ggml_set_input(tok);
    size_t f16 = ggml_row_size(RDG_F16, 1), f32 = ggml_row_size(RDG_F32, 1);
    struct ggml_tensor *x = ggml_add(ctx, ggml_get_rows(ctx, m->tok_emb, tok),
                                     ggml_view_2d(ctx, m->dec_pos, d, n, d * f32, (size_t)past * d * f32));
    for (int l = 0; l < m->n_text_layer; l++) {
        rdg_block *b = &m->dec[l];
        struct ggml_tensor *h = rdg_ln(ctx, x, b->attn_ln_w, b->attn_ln_b);
        struct ggml_tensor *q = rdg_lin(ctx, h, b->q_w, b->q_b);
        struct ggml_tensor *k = rdg_lin(ctx, h, b->k_w, NULL);
        struct ggml_tensor *v = rdg_lin(ctx, h, b->v_w, b->v_b);
        // Store the new rows in the cache (V transposed), then attend over it.
        struct ggml_tensor *kdst = ggml_view_1d(ctx, m->k_self[l], (int64_t)n * d, (size_t)past * d * f16);
        struct ggml_tensor *vdst = ggml_view_2d(ctx, m->v_self[l], n, d, C * f16, (size_t)past * f16);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, k, kdst));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_transpose(ctx, v), vdst));
        struct ggml_tensor *K = ggml_view_3d(ctx, m->k_self[l], hd, nh, L, hd * f16, d * f16, 0);
        struct ggml_tensor *V = ggml_view_3d(ctx, m->v_self[l], L, hd, nh, C * f16, (size_t)C * hd * f16, 0);
        struct ggml_tensor *a = rdg_attend(ctx, q, K, V, n, L, d, nh, 1, past);
        x = ggml_add(ctx, x, rdg_lin(ctx, a, b->o_w, b->o_b));

        h = rdg_ln(ctx, x, b->cross_ln_w, b->cross_ln_b);
        q = rdg_lin(ctx, h, b->cq_w, b->cq_b);
        K = ggml_view_3d(ctx, m->k_cross[l], hd, nh, T, hd * f16, d * f16, 0);
        V = ggml_view_3d(ctx, m->v_cross[l], T, hd, nh, A * f16, (size_t)A * hd * f16, 0);
        a = rdg_attend(ctx, q, K, V, n, T, d, nh, 0, 0);
        x = ggml_add(ctx, x, rdg_lin(ctx, a, b->co_w, b->co_b));

        h = rdg_ln(ctx, x, b->mlp_ln_w, b->mlp_ln_b);
        h = rdg_lin(ctx, ggml_gelu(ctx, rdg_lin(ctx, h, b->fc1_w, b->fc1_b)), b->fc2_w, b->fc2_b);
        x = ggml_add(ctx, x, h);
    }
    x = rdg_ln(ctx, x, m->dec_ln_w, m->dec_ln_b);
    ggml_set_output(x);
    ggml_build_forward_expand(gf, x);
    *tok_out = tok;
    *x_out = x;
}

int rdg_decode(rdg_model *m, const int32_t *tokens, int n, int past, int cross_ctx, float *out) {
    struct ggml_context *ctx = rdg_ctx(m);
    if (!ctx) return -1;
    struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, RDG_MAX_NODES, false);
    struct ggml_tensor *tok, *x;
    rdg_build_decode(m, ctx, gf, n, past, cross_ctx, &tok, &x);
    int rc = -1;
    if (rdg_alloc_graph(m->alloc, gf)) {
        ggml_backend_tensor_set(tok, tokens, 0, (size_t)n * sizeof(int32_t));
        rc = ggml_backend_graph_compute(m->backend, gf);
        if (rc == 0) ggml_backend_tensor_get(x, out, 0, (size_t)n * m->d_text * sizeof(float));
    }
    ggml_free(ctx);
    return rc;
}

// rdg_build_logits builds the product of the first rows rows of the token
// embedding with one hidden state: *h is its input ([d_text]), *out its
// output ([rows]). whisper.cpp computes the logits the same way, as the
// last product of its decoder graph.
static void rdg_build_logits(rdg_model *m, struct ggml_context *ctx, struct ggml_cgraph *gf, int rows,
                             struct ggml_tensor **h_out, struct ggml_tensor **out) {
    struct ggml_tensor *h = ggml_new_tensor_1d(ctx, RDG_F32, m->d_text);
    ggml_set_input(h);
    struct ggml_tensor *w = ggml_view_2d(ctx, m->tok_emb, m->d_text, rows, ggml_row_size(m->tok_type, m->d_text), 0);
    struct ggml_tensor *y = ggml_mul_mat(ctx, w, h);
    ggml_set_output(y);
    ggml_build_forward_expand(gf, y);
    *h_out = h;
    *out = y;
}

int rdg_logits(rdg_model *m, const float *hidden, int rows, float *out) {
    struct ggml_context *ctx = rdg_ctx(m);
    if (!ctx) return -1;
    struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, RDG_MAX_NODES, false);
    struct ggml_tensor *h, *y;
    rdg_build_logits(m, ctx, gf, rows, &h, &y);
    int rc = -1;
    if (rdg_alloc_graph(m->alloc_logits, gf)) {
        ggml_backend_tensor_set(h, hidden, 0, (size_t)m->d_text * sizeof(float));
        rc = ggml_backend_graph_compute(m->backend, gf);
        if (rc == 0) ggml_backend_tensor_get(y, out, 0, (size_t)rows * sizeof(float));
    }
    ggml_free(ctx);
    return rc;
}

// rdg_reserve plans every graph at its largest, the full window (the convolutions, a layer
// and the final norm of the encoder, the cross K/V, a decoder batch of
// max_batch tokens from position 0 and one token at the last position,
// the logits of every row) and, with measure, writes the compute memory
// they need to *bytes without allocating it, after checking that the
// backend supports every op of them (else -2, the op in m->unsupported);
// else allocates it, so that no graph allocates later, mid-turn. 0 on
// success, -1 when an allocation failed (or the graph context could not be
// had).
int rdg_reserve(rdg_model *m, int max_batch, int measure, size_t *bytes) {
    size_t most = 0;
    m->n_ctx = m->n_audio_ctx; // every graph at the full window

    for (int g = 0; g < 7; g++) {
        struct ggml_context *ctx = rdg_ctx(m);
        if (!ctx) return -1;
        struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, RDG_MAX_NODES, false);
        struct ggml_gallocr *alloc = m->alloc;
        struct ggml_tensor *a, *b;
        switch (g) {
        case 0: rdg_build_encoder(m, ctx, gf, 0); break;
        case 1: rdg_build_encoder(m, ctx, gf, 1); break;
        case 2: rdg_build_encoder(m, ctx, gf, m->n_audio_layer + 1); break;
        case 3: rdg_build_cross(m, ctx, gf); break;
        case 4: rdg_build_decode(m, ctx, gf, max_batch, 0, m->n_audio_ctx, &a, &b); break;
        case 5: rdg_build_decode(m, ctx, gf, 1, m->n_text_ctx - 1, m->n_audio_ctx, &a, &b); break;
        default:
            rdg_build_logits(m, ctx, gf, m->n_vocab, &a, &b);
            alloc = m->alloc_logits;
        }
        bool ok = true;
        if (measure) {
            // An op the backend cannot run would abort ggml mid-turn:
            // refuse the placement here instead.
            for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
                struct ggml_tensor *t = ggml_graph_node(gf, i);
                if (!ggml_backend_supports_op(m->backend, t)) {
                    m->unsupported = ggml_op_desc(t);
                    ggml_free(ctx);
                    return -2;
                }
            }
            size_t sz = 0;
            ggml_gallocr_reserve_n_size(alloc, gf, NULL, NULL, &sz);
            if (g < 6 && sz > most) most = sz;
            if (g == 6) most += sz;
        } else {
            ok = !rdg_fail_now() && ggml_gallocr_reserve(alloc, gf);
        }
        ggml_free(ctx);
        if (!ok) return -1;
    }
    if (measure) *bytes = most;
    return 0;
}

// rdg_device_memory writes the free and total memory of the backend's
// device (ggml_backend_dev_memory) and returns its description.
const char *rdg_device_memory(rdg_model *m, size_t *free, size_t *total) {
    struct ggml_backend_device *dev = ggml_backend_get_device(m->backend);
    *free = *total = 0;
    if (!dev) return "";
    ggml_backend_dev_memory(dev, free, total);
    return ggml_backend_dev_description(dev);
}
