package main

import (
	"os"

	"github.com/replyd/replyd/engine/whisper"
)

// whisperPlacement returns how speech is placed when its compute path is
// compute: fallback, when REPLYD_WHISPER_BACKEND is auto, lets a graph path
// that cannot be placed on the GPU (no room, a failed allocation) fall back
// to the CPU with a warning, where gpu asked for fails the start; reserve
// is the GPU memory that the language model's weights will take after it
// (the GGUF file's size, an upper bound when only some layers go there; its
// KV cache and compute buffers come on top), which speech leaves free.
func whisperPlacement(cfg *Config, compute string) (fallback bool, reserve int64) {
	if compute != whisper.ComputeGPU {
		return false, 0
	}
	fallback = cfg.WhisperBackend == "" || cfg.WhisperBackend == "auto"
	if cfg.GPULayers != 0 {
		if st, err := os.Stat(cfg.LLMModel); err == nil {
			reserve = st.Size()
		}
	}
	return fallback, reserve
}
