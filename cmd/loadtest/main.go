// Command loadtest drives a replyd server the way a clinic's tablets do and
// checks that it holds up: N simulated tablets, each with its own API key,
// send /v1/infer requests with and without a recording, mixed with the admin
// page's reads (logs, stats, keys), for a fixed time. It prints throughput
// and p50/p95/p99 latency by route and the responses by status, then checks
// that replyd logged every inference it answered exactly once.
//
//	go run ./cmd/loadtest -bin bin/replyd                  # starts replyd itself
//	go run ./cmd/loadtest -url http://127.0.0.1:8080 -admin-key KEY
//
// With -bin it starts the binary on a free loopback port with a temporary
// data directory and the demo models (`replyd models demo`), and stops it at
// the end (then runs `replyd check` on the data file). Traffic goes only to
// loopback addresses: -url must name one.
//
// With -switch-every it switches the language model between two model files
// during the run, as an admin does from the Models view, and checks that
// every answer names one of them.
//
// It exits non-zero when any response is a 5xx other than 503 overloaded
// (or loading, while a model is switched),
// when a request fails without a response, or when the number of infer log
// entries differs from the number of infer responses received.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type config struct {
	bin        string
	url        string
	adminKey   string
	tablets    int
	duration   time.Duration
	audioShare float64
	adminShare float64
	think      time.Duration
	seed       int64
	keep       bool
	serverEnv  envList
	// switchEvery, with -bin: switch the language model every this long
	// during the run (switch.go).
	switchEvery time.Duration
}

// envList is a repeatable -server-env KEY=VALUE flag.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(k, "REPLYD_") {
		return fmt.Errorf("%q is not REPLYD_NAME=value", v)
	}
	*e = append(*e, v)
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "", "replyd binary to start on a free loopback port with demo models (e.g. bin/replyd)")
	fs.StringVar(&c.url, "url", "", "base URL of a running replyd on a loopback address, instead of -bin")
	fs.StringVar(&c.adminKey, "admin-key", "", "X-ADMIN-KEY of the server given by -url")
	fs.IntVar(&c.tablets, "tablets", 20, "simulated tablets, each with its own API key")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long the tablets send requests")
	fs.Float64Var(&c.audioShare, "audio", 0.4, "share of requests that are inferences with a recording")
	fs.Float64Var(&c.adminShare, "admin", 0.15, "share of requests that are admin reads (logs, stats, keys)")
	fs.DurationVar(&c.think, "think", 0, "mean pause of a tablet between two requests, jittered 0.5x-1.5x, with random start offsets (0: closed loop, send the next at once)")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the request mix")
	fs.BoolVar(&c.keep, "keep", false, "with -bin: keep the temporary data directory and server log")
	fs.DurationVar(&c.switchEvery, "switch-every", 0, "with -bin: switch the language model between two model files every this long during the run (beside and swap in turn) and check that every answer names the model that made it (0: no switching)")
	fs.Var(&c.serverEnv, "server-env", "with -bin: REPLYD_NAME=value for the started server (repeatable), e.g. REPLYD_QUEUE_SIZE=8")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case (c.bin == "") == (c.url == ""):
		return c, fmt.Errorf("give exactly one of -bin or -url")
	case c.url != "" && len(c.serverEnv) > 0:
		return c, fmt.Errorf("-server-env needs -bin")
	case c.url != "" && c.adminKey == "":
		return c, fmt.Errorf("-url needs -admin-key")
	case c.url != "" && c.switchEvery != 0:
		return c, fmt.Errorf("-switch-every needs -bin")
	case c.switchEvery < 0:
		return c, fmt.Errorf("-switch-every must not be negative")
	case c.tablets < 1:
		return c, fmt.Errorf("-tablets must be at least 1")
	case c.duration <= 0:
		return c, fmt.Errorf("-duration must be positive")
	case c.audioShare < 0 || c.adminShare < 0 || c.audioShare+c.adminShare > 1:
		return c, fmt.Errorf("-audio and -admin must be shares between 0 and 1 with a sum of at most 1")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 2
		}
		return 0
	}
	base, adminKey := cfg.url, cfg.adminKey
	var srv *server
	if cfg.bin != "" {
		srv, err = startServer(ctx, cfg.bin, cfg.serverEnv, cfg.switchEvery > 0)
		if err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 1
		}
		base, adminKey = srv.URL, srv.AdminKey
		fmt.Fprintf(stdout, "started %s on %s (data and log in %s)\n", cfg.bin, base, srv.dir)
	} else if err := requireLoopback(base); err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}

	res, err := drive(ctx, cfg, base, adminKey, stdout)
	code := 0
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		code = 1
	}
	if res != nil {
		res.print(stdout)
		if problems := res.problems(); len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(stderr, "FAIL:", p)
			}
			code = 1
		} else if err == nil {
			more := ""
			if cfg.switchEvery > 0 {
				more = "; every answer made by one of the models switched between, each answering some"
			}
			fmt.Fprintf(stdout, "PASS: no 5xx other than 503 overloaded or loading, every infer response logged exactly once%s\n", more)
		}
	}
	if srv != nil {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(stderr, "loadtest: stopping replyd:", err)
			code = 1
		}
		if out, err := srv.check(ctx); err != nil {
			fmt.Fprintf(stderr, "FAIL: replyd check after the run: %v\n%s", err, out)
			code = 1
		} else {
			fmt.Fprint(stdout, out)
		}
		if cfg.keep || code != 0 {
			fmt.Fprintf(stdout, "kept %s (server log: %s)\n", srv.dir, srv.logPath)
		} else {
			_ = os.RemoveAll(srv.dir)
		}
	}
	return code
}
