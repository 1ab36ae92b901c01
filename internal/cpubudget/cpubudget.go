// Package cpubudget finds the number of cores this process may really use:
// the CPUs of its affinity mask (taskset, cpuset) and its cgroup's CPU
// quota (a container's --cpus, systemd's CPUQuota=), not the host's count.
// replyd plans its threads with it (cmd/replyd's REPLYD_CPU_CORES default,
// the engines' default thread counts).
package cpubudget

import (
	"bufio"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Budget is the cores the process may use and where that figure comes from.
type Budget struct {
	// Cores is min(Affinity, floor(Quota)), at least 1.
	Cores int `json:"cores"`
	// Source names what set Cores: "affinity" (the CPUs the process may
	// run on), "cgroup v2 cpu.max" or "cgroup v1 cpu.cfs_quota_us" (with
	// the cgroup's path), "host" where neither could be read.
	Source string `json:"source"`
	// Affinity is the number of CPUs in the affinity mask (0: unknown).
	Affinity int `json:"affinity_cpus"`
	// Quota is the cgroup's CPU quota in cores (quota / period, the
	// smallest on the way from the process's cgroup to the root); 0 when
	// there is none.
	Quota float64 `json:"cgroup_quota_cores,omitempty"`
	// Host is the number of CPUs the host has online.
	Host int `json:"host_cpus"`
}

// String renders b for the log: "2 cores (affinity)".
func (b Budget) String() string {
	return fmt.Sprintf("%d cores (%s)", b.Cores, b.Source)
}

// Cores is the process's budget, found once (Detect).
func Cores() int { return current().Cores }

// Current is the process's budget, found once at its first use.
func Current() Budget { return current() }

var current = sync.OnceValue(func() Budget {
	return Detect(os.DirFS("/"), affinityCPUs(), hostCPUs())
})

// hostCPUs is the number of online CPUs of the host.
func hostCPUs() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := countCPUList(strings.TrimSpace(string(b))); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
}

// countCPUList counts the CPUs of a kernel CPU list ("0-3,6"); 0 when it
// does not parse.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// Detect computes the budget from the file tree root (the real one is
// os.DirFS("/"): it reads proc/self/mountinfo, proc/self/cgroup and the
// cgroup files below the mount points found there), the number of CPUs in
// the affinity mask (0: unknown) and the host's CPU count.
//
// Rounding: the quota is rounded down, because replyd's threads are busy
// compute threads: with a quota of 1.5 cores two such threads use up the
// period's quota in two thirds of it and then both stall, which costs more
// than the half core left unused (a quota under 1 still gives 1 thread).
func Detect(root fs.FS, affinity, host int) Budget {
	b := Budget{Affinity: affinity, Host: host, Cores: host, Source: "host"}
	if host < 1 {
		b.Cores = 1
	}
	if affinity > 0 {
		b.Cores, b.Source = affinity, "affinity"
	}
	quota, where := cgroupQuota(root)
	if quota > 0 {
		b.Quota = math.Round(quota*1000) / 1000
		if q := max(1, int(math.Floor(quota+1e-9))); q < b.Cores {
			b.Cores, b.Source = q, where
		}
	}
	return b
}

// mount is a cgroup file system mounted at dir showing the hierarchy from
// root (mountinfo's fourth field).
type mount struct{ dir, root string }

// cgroupQuota returns the smallest CPU quota, in cores, on the path from
// the process's cgroup up to its hierarchy's root, and where it was found;
// 0 when there is none or it cannot be read.
func cgroupQuota(root fs.FS) (float64, string) {
	v2, v1 := cgroupMounts(root)
	groups := procCgroups(root)
	best, where := 0.0, ""
	consider := func(q float64, w string) {
		if q > 0 && (best == 0 || q < best) {
			best, where = q, w
		}
	}
	if v2 != nil {
		if p, ok := groups[""]; ok {
			walk(root, *v2, p, func(dir, rel string) {
				if b, err := fs.ReadFile(root, path.Join(dir, "cpu.max")); err == nil {
					consider(parseCPUMax(string(b)), "cgroup v2 cpu.max "+rel)
				}
			})
		}
	}
	if v1 != nil {
		for ctrls, p := range groups {
			if !hasController(ctrls, "cpu") {
				continue
			}
			walk(root, *v1, p, func(dir, rel string) {
				qb, err1 := fs.ReadFile(root, path.Join(dir, "cpu.cfs_quota_us"))
				pb, err2 := fs.ReadFile(root, path.Join(dir, "cpu.cfs_period_us"))
				if err1 == nil && err2 == nil {
					consider(parseQuotaPeriod(strings.TrimSpace(string(qb)), strings.TrimSpace(string(pb))), "cgroup v1 cpu.cfs_quota_us "+rel)
				}
			})
		}
	}
	return best, where
}

// walk calls fn for the directory of cgroup p in mount m and each of its
// parents up to the mount point; rel is the cgroup's path in the hierarchy.
func walk(root fs.FS, m mount, p string, fn func(dir, rel string)) {
	rel := p
	if m.root != "/" {
		r, ok := strings.CutPrefix(p, m.root)
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			// The cgroup is outside what is mounted (another namespace):
			// only the mount point's own limit applies here.
			fn(m.dir, m.root)
			return
		}
		rel = r
	}
	for {
		fn(path.Join(m.dir, rel), path.Join(m.root, rel))
		if rel == "/" || rel == "" || rel == "." {
			return
		}
		rel = path.Dir(rel)
	}
}

// cgroupMounts finds the cgroup v2 mount and the v1 mount holding the cpu
// controller in proc/self/mountinfo; paths are relative to root.
func cgroupMounts(root fs.FS) (v2, v1 *mount) {
	f, err := root.Open("proc/self/mountinfo")
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional…] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 1 {
			continue
		}
		m := &mount{dir: strings.TrimPrefix(path.Clean(a[4]), "/"), root: a[3]}
		switch {
		case b[0] == "cgroup2" && v2 == nil:
			v2 = m
		case b[0] == "cgroup" && len(b) >= 3 && hasController(b[2], "cpu") && v1 == nil:
			v1 = m
		}
	}
	return v2, v1
}

// procCgroups maps the controller list of each line of proc/self/cgroup
// ("" for the v2 hierarchy) to the process's cgroup path.
func procCgroups(root fs.FS) map[string]string {
	out := map[string]string{}
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

// hasController reports whether the comma list s names c.
func hasController(s, c string) bool {
	for _, x := range strings.Split(s, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// parseCPUMax reads cgroup v2's cpu.max ("max 100000" or "50000 100000").
func parseCPUMax(s string) float64 {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0
	}
	return parseQuotaPeriod(f[0], f[1])
}

// parseQuotaPeriod returns quota/period in cores; 0 for "max", -1 or junk.
func parseQuotaPeriod(q, p string) float64 {
	quota, err1 := strconv.ParseInt(q, 10, 64)
	period, err2 := strconv.ParseInt(p, 10, 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0
	}
	return float64(quota) / float64(period)
}
