package api

// Platform is what this box computes on, shown by /v1/admin/status
// ("kernels", "cpu") and the admin page's Status view. cmd/replyd fills it
// at start-up (the engines' kernels do not change while it runs).
type Platform struct {
	Kernels KernelsView
	CPU     CPUView
}

// KernelsView names the kernels of the two engines.
type KernelsView struct {
	// OpenBLASCore is the core whose kernels speech-to-text's OpenBLAS
	// runs ("SkylakeX", "Haswell", "Prescott" …).
	OpenBLASCore string `json:"openblas_core"`
	// OpenBLASSource says who chose it: "openblas" (its own choice, the
	// best for this CPU), "replyd" (OpenBLAS had fallen back to an older
	// core, replyd set OPENBLAS_CORETYPE), "admin" (OPENBLAS_CORETYPE was
	// set outside replyd, kept as it is) or "unknown" (no best core known
	// for this CPU: OpenBLAS's choice is kept).
	OpenBLASSource string `json:"openblas_source"`
	// OpenBLASCorrectedFrom is the core OpenBLAS had chosen by itself,
	// when replyd replaced it.
	OpenBLASCorrectedFrom string `json:"openblas_corrected_from,omitempty"`
	// OpenBLASBest is the core replyd considers best for this CPU ("" when
	// it knows none).
	OpenBLASBest string `json:"openblas_best"`
	// OpenBLASConfig is OpenBLAS's build description (openblas_get_config).
	OpenBLASConfig string `json:"openblas_config"`
	// GGMLCPU lists the CPU features the language model's ggml was built
	// for ("SSE3 SSSE3 AVX AVX2 F16C FMA …").
	GGMLCPU string `json:"ggml_cpu"`
}

// CPUView is the CPU budget replyd plans its threads with.
type CPUView struct {
	// Cores is REPLYD_CPU_CORES in effect: the cores the two engines share.
	Cores int `json:"cores"`
	// Available is what the process may use: min(affinity mask, the
	// cgroup's CPU quota rounded down), at least 1.
	Available int `json:"available"`
	// Source says where Cores comes from: "configured" (REPLYD_CPU_CORES
	// or --cpu-cores), else what limited Available: "affinity", "cgroup v2
	// cpu.max /path", "cgroup v1 cpu.cfs_quota_us /path" or "host".
	Source string `json:"source"`
	// AffinityCPUs is the number of CPUs in the process's affinity mask.
	AffinityCPUs int `json:"affinity_cpus"`
	// CgroupQuotaCores is the cgroup's CPU quota in cores; absent when
	// there is none.
	CgroupQuotaCores float64 `json:"cgroup_quota_cores,omitempty"`
	// HostCPUs is the number of CPUs the host has online.
	HostCPUs int `json:"host_cpus"`
}
