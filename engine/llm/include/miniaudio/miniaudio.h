/*
 * replyd's stand-in for miniaudio.h.
 *
 * llama.cpp's multimodal helper (tools/mtmd/mtmd-helper.cpp) includes
 * miniaudio to decode audio for audio-input models. The Go module zip of
 * github.com/ollama/ollama drops llama.cpp's vendor/ folder, so the header is
 * absent. replyd never feeds audio to the language model (speech goes through
 * engine/whisper), so this header declares just what mtmd-helper.cpp names,
 * and every decoder call fails with MA_ERROR: mtmd then reports that the
 * audio could not be decoded instead of crashing.
 */
#ifndef REPLYD_MINIAUDIO_STUB_H
#define REPLYD_MINIAUDIO_STUB_H

#include <stddef.h>
#include <stdint.h>

#ifndef MA_API
#define MA_API
#endif

typedef int ma_result;
typedef uint64_t ma_uint64;
typedef uint32_t ma_uint32;

#define MA_SUCCESS 0
#define MA_ERROR (-1)

typedef enum { ma_format_unknown = 0, ma_format_f32 = 5 } ma_format;
typedef enum { ma_encoding_format_unknown = 0, ma_encoding_format_wav = 1 } ma_encoding_format;

typedef struct {
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_decoder_config;

typedef struct {
    int unused;
} ma_decoder;

typedef struct {
    ma_encoding_format encodingFormat;
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_encoder_config;

typedef struct {
    int unused;
} ma_encoder;

MA_API ma_decoder_config ma_decoder_config_init(ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_decoder_config c;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

MA_API ma_result ma_decoder_init_memory(const void *data, size_t size, const ma_decoder_config *config, ma_decoder *decoder) {
    (void)data; (void)size; (void)config; (void)decoder;
    return MA_ERROR; /* audio input to the LLM is not supported in replyd */
}

MA_API ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *decoder, ma_uint64 *length) {
    (void)decoder;
    if (length) *length = 0;
    return MA_ERROR;
}

MA_API ma_result ma_decoder_read_pcm_frames(ma_decoder *decoder, void *frames, ma_uint64 count, ma_uint64 *read) {
    (void)decoder; (void)frames; (void)count;
    if (read) *read = 0;
    return MA_ERROR;
}

MA_API ma_result ma_decoder_uninit(ma_decoder *decoder) {
    (void)decoder;
    return MA_SUCCESS;
}

MA_API ma_encoder_config ma_encoder_config_init(ma_encoding_format encodingFormat, ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_encoder_config c;
    c.encodingFormat = encodingFormat;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

MA_API ma_result ma_encoder_init_file(const char *path, const ma_encoder_config *config, ma_encoder *encoder) {
    (void)path; (void)config; (void)encoder;
    return MA_ERROR;
}

MA_API ma_result ma_encoder_write_pcm_frames(ma_encoder *encoder, const void *frames, ma_uint64 count, ma_uint64 *written) {
    (void)encoder; (void)frames; (void)count;
    if (written) *written = 0;
    return MA_ERROR;
}

MA_API void ma_encoder_uninit(ma_encoder *encoder) {
    (void)encoder;
}

#endif
