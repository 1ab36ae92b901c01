// Prototypes of the ggml functions that replyd's Whisper graphs call. The
// ggml they link to is the one github.com/ollama/ollama v0.17.4 vendors and
// compiles (ml/backend/ggml/ggml: the base library and the CPU backend;
// engine/whisper imports that package so that they are linked in). Its
// headers are not on cgo's include path, so the prototypes are declared
// here by hand, as engine/llm declares llama.h's; UPGRADING ollama:
// TestPrototypesMatchGGMLH (graph_test.go) compares every one of them with
// ggml.h, ggml-alloc.h, ggml-backend.h and ggml-cpu.h of the module in
// go.mod and names any function whose types changed.
#ifndef REPLYD_GGMLAPI_H
#define REPLYD_GGMLAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_backend;
struct ggml_backend_buffer;
struct ggml_backend_buffer_type;
struct ggml_gallocr;
struct ggml_backend_device;

// enum ggml_type values (ggml.h), as whisper.cpp's files number them too.
enum { RDG_F32 = 0, RDG_F16 = 1, RDG_I32 = 26 };
// enum ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_GPU.
enum { RDG_DEV_GPU = 1 };

// struct ggml_init_params, laid out as ggml.h lays it out.
struct ggml_init_params {
    size_t mem_size;
    void * mem_buffer;
    bool no_alloc;
};

typedef bool (*rdg_abort_callback)(void * data);

size_t ggml_tensor_overhead(void);
size_t ggml_graph_overhead_custom(size_t size, bool grads);
struct ggml_context * ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context * ctx);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
size_t ggml_row_size(int type, int64_t ne);
struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1);
struct ggml_tensor * ggml_new_tensor_3d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2);
void ggml_set_input(struct ggml_tensor * tensor);
void ggml_set_output(struct ggml_tensor * tensor);
struct ggml_cgraph * ggml_new_graph_custom(struct ggml_context * ctx, size_t size, bool grads);
void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
struct ggml_tensor * ggml_gelu(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_im2col(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int s0, int s1,
                                 int p0, int p1, int d0, int d1, bool is_2D, int dst_type);
struct ggml_tensor * ggml_transpose(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int axis0, int axis1, int axis2, int axis3);
struct ggml_tensor * ggml_view_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, size_t offset);
struct ggml_tensor * ggml_view_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, size_t nb1,
                                  size_t offset);
struct ggml_tensor * ggml_view_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
                                  size_t nb1, size_t nb2, size_t offset);
struct ggml_tensor * ggml_cpy(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
struct ggml_tensor * ggml_diag_mask_inf(struct ggml_context * ctx, struct ggml_tensor * a, int n_past);
struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale,
                                       float max_bias);
struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);

size_t ggml_backend_dev_count(void);
struct ggml_backend_device * ggml_backend_dev_get(size_t index);
int ggml_backend_dev_type(struct ggml_backend_device * device);
struct ggml_backend * ggml_backend_cpu_init(void);
void ggml_backend_cpu_set_n_threads(struct ggml_backend * backend_cpu, int n_threads);
void ggml_backend_cpu_set_abort_callback(struct ggml_backend * backend_cpu, rdg_abort_callback abort_callback,
                                         void * abort_callback_data);
struct ggml_backend * ggml_backend_init_by_type(int type, const char * params);
const char * ggml_backend_name(struct ggml_backend * backend);
void ggml_backend_free(struct ggml_backend * backend);
struct ggml_backend_buffer * ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, struct ggml_backend * backend);
void ggml_backend_buffer_free(struct ggml_backend_buffer * buffer);
size_t ggml_backend_buffer_get_size(struct ggml_backend_buffer * buffer);
void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
struct ggml_backend_buffer_type * ggml_backend_get_default_buffer_type(struct ggml_backend * backend);
int ggml_backend_graph_compute(struct ggml_backend * backend, struct ggml_cgraph * cgraph);
struct ggml_gallocr * ggml_gallocr_new(struct ggml_backend_buffer_type * buft);
void ggml_gallocr_free(struct ggml_gallocr * galloc);
bool ggml_gallocr_alloc_graph(struct ggml_gallocr * galloc, struct ggml_cgraph * graph);
size_t ggml_gallocr_get_buffer_size(struct ggml_gallocr * galloc, int buffer_id);
bool ggml_gallocr_reserve(struct ggml_gallocr * galloc, struct ggml_cgraph * graph);
void ggml_gallocr_reserve_n_size(struct ggml_gallocr * galloc, struct ggml_cgraph * graph, const int * node_buffer_ids,
                                 const int * leaf_buffer_ids, size_t * sizes);
size_t ggml_backend_alloc_ctx_tensors_from_buft_size(struct ggml_context * ctx, struct ggml_backend_buffer_type * buft);
struct ggml_backend_device * ggml_backend_get_device(struct ggml_backend * backend);
void ggml_backend_dev_memory(struct ggml_backend_device * device, size_t * free, size_t * total);
const char * ggml_backend_dev_description(struct ggml_backend_device * device);
bool ggml_backend_supports_op(struct ggml_backend * backend, const struct ggml_tensor * op);
int ggml_graph_n_nodes(struct ggml_cgraph * cgraph);
struct ggml_tensor * ggml_graph_node(struct ggml_cgraph * cgraph, int i);
const char * ggml_op_desc(const struct ggml_tensor * t);

#endif
