package llm

// GGUF is the model format llama.cpp reads. gguf_read.go reads what Open needs
// from a file's header; gguf_write.go writes the generated models. This file
// holds what both share.

// GGUF value types (gguf.h).
const (
	ggufUint8   = 0
	ggufInt8    = 1
	ggufUint16  = 2
	ggufInt16   = 3
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
	ggufUint64  = 10
	ggufInt64   = 11
	ggufFloat64 = 12
)

// ggufAlignment is the alignment of the tensor data section and of each
// tensor in it (general.alignment, which the generated files leave at the default).
const ggufAlignment = 32
