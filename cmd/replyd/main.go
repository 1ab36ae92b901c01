// Command replyd is the reply-suggestion appliance for AAC users: one binary
// with speech-to-text, a language model, storage and the admin page.
//
//	replyd [serve]            run the service (the default)
//	replyd config             print the effective configuration, secrets masked
//	replyd admin-key --reset  make a new admin key (replyd must be stopped)
//	replyd models add FILE    copy a model file into the data directory's models folder
//	replyd models list        the model files in that folder
//	replyd models demo        write the tiny demo models
//	replyd models synth       write a random-weight model with a real model's shape
//	replyd models steps       time decode steps of a language model (benchmarks)
//	replyd models verify      check model files against the manifest
//	replyd transcribe FILE    transcribe a recording with a Whisper model
//	replyd backup --out FILE  hot, consistent copy of the data file
//	replyd restore FILE       replace the data file with a backup (stopped)
//	replyd check              bbolt consistency check of the data file
//	replyd eval               score system prompts offline on recorded dialogs
//	replyd store migrate      copy a bbolt data file into PostgreSQL
//	replyd kernels            the engines' kernels and the CPU budget
//	replyd version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	correctKernels() // first: may re-execute replyd on OpenBLAS's best kernels (kernels.go)
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `replyd: offline reply suggestions for AAC users.

Usage:
  replyd [serve] [options]              run the service (replyd serve --help lists every option)
  replyd config [options]               print the effective configuration, secrets masked
  replyd admin-key --reset              make a new admin key and print it once (stop replyd first)
  replyd models add [--data-dir DIR] FILE
                                        copy a model file (from a USB stick, say) into the data
                                        directory's models folder, checked; the admin page offers it
  replyd models list [--data-dir DIR]   the model files in the data directory's models folder
  replyd models demo [--dir DIR]        write the tiny random-weight demo models
  replyd models synth --shape NAME [--type T] [--dir DIR]
                                        write a random-weight model with the shape of Whisper
                                        tiny.en/base.en/small.en or Qwen2.5 0.5B/1.5B (with Qwen's
                                        tokenizer, --tokenizer FILE); prints its path
  replyd models steps --model FILE [--seqs N] [--contexts N,N,...]
                                        time decode steps after prompts of those lengths (JSON)
  replyd models verify [--dir DIR]      check model files against models/manifest.json
  replyd transcribe --model PATH [--language xx] [--threads N] [--json] FILE
  replyd backup --out FILE              hot, consistent copy of the data file (PostgreSQL: pg_dump)
  replyd restore FILE                   replace the data file with a backup (stop replyd first)
  replyd check                          consistency check of the data file (exit 0: consistent,
                                        1: could not check, 3: damaged, restore the last backup)
  replyd eval [--dialogs FILE.jsonl] [--prompt-file F | --prompt-version V --server URL] [-n 4] [--json]
                                        score prompts offline on recorded dialogs (built-in set by default)
  replyd store migrate --from FILE --to postgres://… [--force]
                                        copy a bbolt data file into PostgreSQL (stop replyd first)
  replyd kernels                        the engines' kernels and the CPU budget (JSON)
  replyd version
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = cmdServe(ctx, args, getenv, stderr)
	case "config":
		err = cmdConfig(args, getenv, stdout, stderr)
	case "admin-key":
		err = cmdAdminKey(args, getenv, stderr)
	case "models":
		err = cmdModels(args, stdout, stderr)
	case "transcribe":
		err = cmdTranscribe(ctx, args, stdout, stderr)
	case "backup":
		err = cmdBackup(ctx, args, getenv, stdout, stderr)
	case "restore":
		err = cmdRestore(args, getenv, stdout, stderr)
	case "check":
		err = cmdCheck(args, getenv, stdout, stderr)
	case "eval":
		err = cmdEval(ctx, args, getenv, stdout, stderr)
	case "store":
		err = cmdStore(ctx, args, stdout, stderr)
	case "kernels":
		err = cmdKernels(stdout)
	case "version", "--version":
		fmt.Fprintln(stdout, "replyd", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "replyd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "replyd: %v\n", err)
		if e := (*exitError)(nil); errors.As(err, &e) {
			return e.code
		}
		return 1
	}
	return 0
}

func cmdServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, rest, err := LoadConfig("serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", rest)
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	log.Info("kernels", kernelsLog(platform(cfg.CPUCores)).args()...)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := &Server{cfg: cfg, log: log, stderr: stderr}
	if err := s.Run(ctx); err != nil {
		_ = s.Close()
		return err
	}
	werr := s.Wait(ctx)
	if werr == nil {
		log.Info("shutting down: finishing in-flight requests", "grace", cfg.ShutdownGrace.String())
	}
	cerr := s.Close()
	if werr != nil {
		return werr
	}
	if cerr == nil {
		log.Info("replyd stopped")
	}
	return cerr
}

func cmdConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, _, err := LoadConfig("config", args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.Print(stdout)
	return nil
}

func cmdAdminKey(args []string, getenv func(string) string, stderr io.Writer) error {
	reset := false
	var rest []string
	for _, a := range args {
		if a == "--reset" || a == "-reset" {
			reset = true
		} else {
			rest = append(rest, a)
		}
	}
	if !reset {
		return errors.New("admin-key: use `replyd admin-key --reset` to replace the admin key (the old one stops working)")
	}
	cfg, _, err := LoadConfig("admin-key", rest, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.AdminKey != "" {
		return errors.New("admin-key --reset: REPLYD_ADMIN_KEY is set, so the configured key would replace the new one at the next start; change it in the configuration instead")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	db, err := openStore(context.Background(), cfg, log)
	if err != nil {
		return err
	}
	defer db.Close()
	return resetAdminKey(db, stderr, log)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("REPLYD_LOG_LEVEL: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(cfg *Config, w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
