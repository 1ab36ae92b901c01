//go:build !linux

package cpubudget

import "runtime"

// affinityCPUs is runtime.NumCPU where the affinity mask is not read.
func affinityCPUs() int { return runtime.NumCPU() }
