package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// server is one replyd process started for the benchmark.
type server struct {
	*replydproc.Proc
	dir string
	log *os.File // nil without -logs
}

// startServer starts `bin serve` with a temporary data directory and env
// (REPLYD_NAME=value) and waits until /healthz answers 200: both models
// loaded and warmed up. A non-empty logPath gets the process's output.
func startServer(ctx context.Context, bin string, env []string, logPath string) (*server, error) {
	dir, err := os.MkdirTemp("", "replyd-benchlatency-")
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	opts := replydproc.Options{Bin: bin, DataDir: dir + "/data", Env: vars}
	var logFile *os.File
	if logPath != "" {
		if logFile, err = os.Create(logPath); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		opts.Output = logFile
	}
	p, err := replydproc.Start(opts)
	if err != nil {
		os.RemoveAll(dir)
		if logFile != nil {
			logFile.Close()
		}
		return nil, err
	}
	s := &server{Proc: p, dir: dir, log: logFile}
	if err := p.WaitReady(ctx, 10*time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// peakRSS returns the process's peak resident set (VmHWM).
func (s *server) peakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10, err
		}
	}
	return 0, errors.New("no VmHWM line")
}

// stop ends the process and removes its directory.
func (s *server) stop() error {
	defer os.RemoveAll(s.dir)
	err := s.Stop(time.Minute)
	if s.log != nil {
		s.log.Close()
	}
	return err
}

// lastStat is /proc/stat's cpu line at the previous hostLoad.
var lastStat []int64

// hostLoad is the host's 1-minute load average and the share of CPU time
// stolen by the hypervisor since the previous call (since boot at the
// first), to judge the figures by.
func hostLoad() string {
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = string(bytes.Fields(b)[0])
	}
	steal := "unknown"
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		var now []int64
		for _, x := range f[1:] {
			n, _ := strconv.ParseInt(x, 10, 64)
			now = append(now, n)
		}
		var total, st int64
		for i, n := range now {
			if i < len(lastStat) {
				n -= lastStat[i]
			}
			if i < 8 { // user nice system idle iowait irq softirq steal
				total += n
			}
			if i == 7 {
				st = n
			}
		}
		if total > 0 {
			steal = fmt.Sprintf("%.1f%%", 100*float64(st)/float64(total))
		}
		lastStat = now
	}
	return "load " + load + ", steal " + steal
}
