package blascore

import "golang.org/x/sys/cpu"

// CPU returns the features of the CPU this process runs on (as the kernel
// and the CPUID instruction report them: usable, with the OS saving the
// AVX and AVX-512 state).
func CPU() Features {
	x := cpu.X86
	return Features{X86: true,
		SSE3: x.HasSSE3, SSSE3: x.HasSSSE3, SSE41: x.HasSSE41, SSE42: x.HasSSE42,
		AVX: x.HasAVX, AVX2: x.HasAVX2, FMA: x.HasFMA,
		AVX512F: x.HasAVX512F, AVX512BW: x.HasAVX512BW, AVX512DQ: x.HasAVX512DQ,
		AVX512VL: x.HasAVX512VL, AVX512CD: x.HasAVX512CD, AVX512BF16: x.HasAVX512BF16}
}
