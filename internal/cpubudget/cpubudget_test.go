package cpubudget

import (
	"testing"
	"testing/fstest"
)

const v2Mountinfo = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"

const v1Mountinfo = "30 1 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n" +
	"31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
	"32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestDetect(t *testing.T) {
	cases := []struct {
		name           string
		fs             fstest.MapFS
		affinity, host int
		cores          int
		source         string
		quota          float64
	}{
		{"nothing readable", fstest.MapFS{}, 0, 8, 8, "host", 0},
		{"affinity only", fstest.MapFS{}, 3, 8, 3, "affinity", 0},
		{"v2 no limit", fstest.MapFS{
			"proc/self/mountinfo": file(v2Mountinfo),
			"proc/self/cgroup":    file("0::/system.slice/replyd.service\n"),
			"sys/fs/cgroup/system.slice/replyd.service/cpu.max": file("max 100000\n"),
		}, 8, 8, 8, "affinity", 0},
		{"v2 quota on the service, floor", fstest.MapFS{
			"proc/self/mountinfo": file(v2Mountinfo),
			"proc/self/cgroup":    file("0::/system.slice/replyd.service\n"),
			"sys/fs/cgroup/system.slice/replyd.service/cpu.max": file("250000 100000\n"),
		}, 8, 8, 2, "cgroup v2 cpu.max /system.slice/replyd.service", 2.5},
		{"v2 quota on a parent is the smaller", fstest.MapFS{
			"proc/self/mountinfo":       file(v2Mountinfo),
			"proc/self/cgroup":          file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/cpu.max": file("400000 100000\n"),
			"sys/fs/cgroup/a/cpu.max":   file("300000 100000\n"),
		}, 8, 8, 3, "cgroup v2 cpu.max /a", 3},
		{"v2 half a core gives one", fstest.MapFS{
			"proc/self/mountinfo":               file(v2Mountinfo),
			"proc/self/cgroup":                  file("0::/replyd-test\n"),
			"sys/fs/cgroup/replyd-test/cpu.max": file("50000 100000\n"),
		}, 2, 2, 1, "cgroup v2 cpu.max /replyd-test", 0.5},
		{"affinity smaller than quota", fstest.MapFS{
			"proc/self/mountinfo":   file(v2Mountinfo),
			"proc/self/cgroup":      file("0::/\n"),
			"sys/fs/cgroup/cpu.max": file("400000 100000\n"),
		}, 2, 8, 2, "affinity", 4},
		{"container: namespace root", fstest.MapFS{
			"proc/self/mountinfo":   file(v2Mountinfo),
			"proc/self/cgroup":      file("0::/\n"),
			"sys/fs/cgroup/cpu.max": file("150000 100000\n"),
		}, 16, 16, 1, "cgroup v2 cpu.max /", 1.5},
		{"v1 cfs quota", fstest.MapFS{
			"proc/self/mountinfo": file(v1Mountinfo),
			"proc/self/cgroup":    file("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n"),
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  file("200000\n"),
			"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": file("100000\n"),
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":             file("-1\n"),
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":            file("100000\n"),
		}, 4, 4, 2, "cgroup v1 cpu.cfs_quota_us /docker/abc", 2},
		{"v1 no quota", fstest.MapFS{
			"proc/self/mountinfo":                         file(v1Mountinfo),
			"proc/self/cgroup":                            file("3:cpu,cpuacct:/\n"),
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  file("-1\n"),
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": file("100000\n"),
		}, 4, 4, 4, "affinity", 0},
		{"junk files are no limit", fstest.MapFS{
			"proc/self/mountinfo":   file(v2Mountinfo + "garbage line\n"),
			"proc/self/cgroup":      file("0::/\n"),
			"sys/fs/cgroup/cpu.max": file("lots 0\n"),
		}, 4, 4, 4, "affinity", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := Detect(c.fs, c.affinity, c.host)
			if b.Cores != c.cores || b.Source != c.source || b.Quota != c.quota {
				t.Errorf("Detect = %+v, want cores %d source %q quota %v", b, c.cores, c.source, c.quota)
			}
		})
	}
}

func TestCountCPUList(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-3": 4, "0-1,4,6-7": 5, "": 0, "x": 0, "3-1": 0} {
		if got := countCPUList(s); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestCurrent checks the real process: at least one core, never more than
// the affinity mask allows.
func TestCurrent(t *testing.T) {
	b := Current()
	if b.Cores < 1 || (b.Affinity > 0 && b.Cores > b.Affinity) {
		t.Errorf("Current() = %+v", b)
	}
	t.Logf("%+v", b)
}
