package whisper

/*
#include <cblas.h>
*/
import "C"

// OpenBLASCore is the name of the kernels OpenBLAS chose when it was
// loaded (openblas_get_corename: "Haswell", "SkylakeX", "Prescott" …); a
// dynamic OpenBLAS picks them by CPU model, or by OPENBLAS_CORETYPE.
func OpenBLASCore() string { return C.GoString(C.openblas_get_corename()) }

// OpenBLASConfig is OpenBLAS's build description (openblas_get_config:
// version, DYNAMIC_ARCH, threading, the core).
func OpenBLASConfig() string { return C.GoString(C.openblas_get_config()) }
