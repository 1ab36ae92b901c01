// Whisper's encoder and decoder as ggml graphs (graph.c), run on any ggml
// backend: the CPU backend here, CUDA where docs/gpu.md loads it.
#ifndef REPLYD_GRAPH_H
#define REPLYD_GRAPH_H

#include "ggmlapi.h"

// One transformer block's tensors; the cross-attention ones are the
// decoder's only.
typedef struct rdg_block {
    struct ggml_tensor *attn_ln_w, *attn_ln_b, *q_w, *q_b, *k_w, *v_w, *v_b, *o_w, *o_b;
    struct ggml_tensor *cross_ln_w, *cross_ln_b, *cq_w, *cq_b, *ck_w, *cv_w, *cv_b, *co_w, *co_b;
    struct ggml_tensor *mlp_ln_w, *mlp_ln_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} rdg_block;

// The model's tensors, its state tensors and the backend they live on.
typedef struct rdg_model {
    int n_mels, n_frames, n_audio_ctx, d_audio, nh_audio, n_audio_layer;
    int n_text_ctx, d_text, nh_text, n_text_layer;
    int n_vocab, tok_type; // the token embedding's rows and ggml type
    int n_ctx;             // the encoder positions of the window being encoded (audio_ctx), n_audio_ctx at most
    struct ggml_tensor *conv1_w, *conv1_b, *conv2_w, *conv2_b, *enc_pos, *enc_ln_w, *enc_ln_b;
    struct ggml_tensor *dec_pos, *tok_emb, *dec_ln_w, *dec_ln_b;
    rdg_block *enc, *dec;
    // State, every tensor at the full window: the mel input (room for
    // [n_mels][n_frames]; a window of n_ctx positions packs its 2·n_ctx
    // frames per mel first), the encoder's running activations and output
    // [n_audio_ctx][d_audio] (F32); per decoder layer the self-attention
    // cache (K [n_text_ctx][d], V transposed [d][n_text_ctx]) and the
    // cross-attention K ([n_audio_ctx][d]) and V (transposed: d rows of
    // n_audio_ctx), F16. A window uses the first n_ctx rows (columns of V).
    struct ggml_tensor *mel, *enc_x;
    struct ggml_tensor **k_self, **v_self, **k_cross, **v_cross;
    struct ggml_backend *backend;
    struct ggml_gallocr *alloc;        // the encoder's, cross K/V's and decoder's graphs
    struct ggml_gallocr *alloc_logits; // the logits' graph (its own: no re-planning between the two)
    const char *unsupported; // the op the backend cannot run (rdg_reserve)
    void *meta;       // the graph context's memory
    size_t meta_size;
} rdg_model;

// Steps of the encoder over n_ctx positions: the convolutions (0), layer l
// (1+l), the final layer norm (1+n_audio_layer).
int rdg_encoder_steps(const rdg_model *m);
// rdg_encoder_step runs one step; 0 on success.
int rdg_encoder_step(rdg_model *m, int step);
// rdg_cross runs the cross K/V of enc_x's first n_ctx rows; 0 on success.
int rdg_cross(rdg_model *m);
// rdg_decode feeds n tokens at positions past.., the cross-attention over
// the first cross_ctx rows of the cross K/V, and writes the final
// layer-normed hidden states ([n][d_text]) to out; 0 on success.
int rdg_decode(rdg_model *m, const int32_t *tokens, int n, int past, int cross_ctx, float *out);
// rdg_logits writes the logits of ids 0..rows-1 for one hidden state
// ([d_text]) to out; 0 on success.
int rdg_logits(rdg_model *m, const float *hidden, int rows, float *out);
// rdg_reserve measures (measure != 0: *bytes) or allocates the compute
// memory of every graph at its largest; 0 on success.
int rdg_reserve(rdg_model *m, int max_batch, int measure, size_t *bytes);
// rdg_device_memory: the backend's device, its free and total memory.
const char *rdg_device_memory(rdg_model *m, size_t *free, size_t *total);
// rdg_alloc_tensors is ggml_backend_alloc_ctx_tensors behind the test hook.
struct ggml_backend_buffer *rdg_alloc_tensors(struct ggml_context *ctx, struct ggml_backend *backend);
// rdg_fail_countdown: a test hook, see graph.c.
extern int rdg_fail_countdown;

#endif
