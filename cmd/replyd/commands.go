package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/engine/vad"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

func cmdModels(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("models: use `replyd models add [--data-dir DIR] FILE`, `replyd models list [--data-dir DIR]`, `replyd models demo [--dir DIR]`, `replyd models synth --shape NAME [--type T] [--dir DIR]` or `replyd models verify [--dir DIR]`")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("models "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch sub {
	case "demo":
		dir := fs.String("dir", filepath.Dir(DefaultLLMModel), "directory to write llm-demo.gguf and whisper-demo.bin into")
		if err := fs.Parse(args); err != nil {
			return err
		}
		t0 := time.Now()
		if err := writeDemoModels(*dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s in %d ms (random weights: for tests and demos only)\n",
			filepath.Join(*dir, filepath.Base(DefaultLLMModel)), filepath.Join(*dir, filepath.Base(DefaultWhisperModel)), time.Since(t0).Milliseconds())
		return nil
	case "synth":
		return cmdModelsSynth(args, stdout, stderr)
	case "add", "list":
		return cmdModelsFolder(sub, args, stdout, stderr)
	case "steps":
		return cmdModelsSteps(context.Background(), args, stdout, stderr)
	case "verify":
		dir := fs.String("dir", "models", "directory holding the model files")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return verifyModels(*dir, stdout)
	default:
		return fmt.Errorf("models: unknown subcommand %q (add, list, demo, synth, steps, verify)", sub)
	}
}

func cmdTranscribe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("transcribe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", DefaultWhisperModel, "ggml Whisper model file")
	lang := fs.String("language", "", "language code (e.g. en, de); empty: detect (multilingual models)")
	threads := fs.Int("threads", defaultThreads(), "CPU threads")
	asJSON := fs.Bool("json", false, "print JSON with token ids and stage timings")
	maxAudio := fs.Duration("max-audio", 30*time.Minute, "longest accepted recording")
	vadModel := fs.String("vad-model", DefaultVADModel, "Silero VAD v5 ONNX file: transcribe only the speech")
	noVAD := fs.Bool("no-vad", false, "transcribe the whole recording (no voice activity detection)")
	noFallback := fs.Bool("no-fallback", false, "greedy decoding only, no temperature fallback (whisper.cpp's -nf)")
	compute := fs.String("compute", whisper.ComputeBLAS, "where the encoder and decoder run: blas (the CPU path), ggml-cpu, gpu")
	window := fs.String("window", "auto", "the encoder's window: auto, speech, full or a floor in seconds (REPLYD_WHISPER_WINDOW)")
	shortWeights := fs.Bool("short-window-weights", false, "the weights are made for a short window (FUTO's acft): auto uses the speech's own window")
	audioCtx := fs.Int("audio-ctx", 0, "encoder positions, as whisper.cpp's -ac (50 a second; 0: by --window); only for speech of at most one 30 s window")
	if err := fs.Parse(args); err != nil {
		return err
	}
	win, err := whisper.ParseWindow(*window)
	if err != nil {
		return err
	}
	if *audioCtx < 0 {
		return errors.New("transcribe: --audio-ctx must be 0 (the window rule) or more")
	}
	if fs.NArg() != 1 {
		return errors.New("transcribe: give exactly one audio file")
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	t0 := time.Now()
	pcm, err := audio.Decode(data, *maxAudio)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	decodeDur := time.Since(t0)
	m, err := whisper.Load(*model, whisper.Options{Threads: *threads, NoFallback: *noFallback, Compute: *compute,
		Window: win, ShortWindowWeights: *shortWeights})
	if err != nil {
		return err
	}
	defer m.Close()
	t1 := time.Now()
	speech, segments := pcm, -1
	if !*noVAD {
		vm, err := vad.Load(*vadModel)
		if err != nil {
			return fmt.Errorf("%w (or give --no-vad)", err)
		}
		sp, err := vad.NewDetector(vm).KeepSpeech(ctx, pcm)
		if err != nil {
			return err
		}
		speech, segments = sp.PCM, sp.Segments
	}
	var tr engine.Transcript
	call := whisper.CallOptions{AudioCtx: *audioCtx}
	positions, err := m.AudioCtxFor(len(speech), call)
	if err != nil {
		return fmt.Errorf("transcribe: --audio-ctx %d needs speech of at most 30 s (one window); %s has %.1f s: give --audio-ctx 0",
			*audioCtx, fs.Arg(0), float64(len(speech))/16000)
	}
	retries := m.Status().WindowRetries
	if len(speech) > 0 {
		if tr, err = m.TranscribeWith(ctx, speech, engine.TranscribeOptions{Language: *lang}, call); err != nil {
			return err
		}
	}
	wall := time.Since(t1)
	if !*asJSON {
		fmt.Fprintln(stdout, tr.Text)
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := map[string]any{
		"text":          tr.Text,
		"language":      tr.Language,
		"tokens":        tr.Tokens,
		"audio_seconds": float64(len(pcm)) / 16000,
		"no_speech":     len(speech) == 0 || strings.TrimSpace(tr.Text) == "",
		"window":        win.String(),
		"audio_ctx":     positions, // 0: the full window
		// the safety net decoded the shortened window again at 30 s
		"window_retried": m.Status().WindowRetries > retries,
		"timings_ms": map[string]float64{
			"decode":  ms(decodeDur),
			"mel":     ms(tr.Mel),
			"encoder": ms(tr.Encoder),
			"decoder": ms(tr.Decoder),
			"total":   ms(wall),
		},
	}
	if segments >= 0 {
		out["speech_segments"] = segments
		out["speech_seconds"] = float64(len(speech)) / 16000
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func cmdBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var out, url string
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "--out" || a == "-out") && i+1 < len(args):
			out = args[i+1]
			i++
		case (a == "--url" || a == "-url") && i+1 < len(args):
			url = args[i+1]
			i++
		default:
			rest = append(rest, a)
		}
	}
	if out == "" {
		return errors.New("backup: --out FILE is required")
	}
	cfg, _, err := LoadConfig("backup", rest, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.StoreURL != "" {
		return backupPostgres(ctx, cfg.StoreURL, out, stdout)
	}
	f, err := os.OpenFile(out+".partial", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(out + ".partial")
	n, err := backupTo(ctx, cfg, url, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := os.Rename(out+".partial", out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backup: wrote %d bytes to %s\n", n, out)
	return nil
}

// backupTo copies the data file into w. When replyd is stopped it reads the
// file directly; when a running replyd holds the file, it asks that server
// for a hot copy (GET /v1/admin/backup, bbolt's Tx.WriteTo) with the
// configured admin key.
func backupTo(ctx context.Context, cfg *Config, url string, w io.Writer) (int64, error) {
	db, err := bolt.Open(dbPath(cfg), bolt.Options{Timeout: 200 * time.Millisecond, ReadOnly: true})
	if err == nil {
		defer db.Close()
		return db.Backup(w)
	}
	if !errors.Is(err, store.ErrLocked) {
		return 0, err
	}
	if cfg.AdminKey == "" {
		return 0, errors.New("replyd is running and holds the data file: set REPLYD_ADMIN_KEY (or --admin-key) so the backup can be taken from the running server")
	}
	if url == "" {
		url = localURL(cfg)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/admin/backup", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-ADMIN-KEY", cfg.AdminKey)
	client := &http.Client{Timeout: 10 * time.Minute, Transport: localTransport(cfg)}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("asking the running replyd at %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("the running replyd at %s answered %s: %s", url, resp.Status, b)
	}
	return io.Copy(w, resp.Body)
}

// localURL is the URL of this machine's replyd derived from its listen
// address.
func localURL(cfg *Config) string {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		host, port = "", "8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	scheme := "http"
	if cfg.TLSEnabled() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

func cmdRestore(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var src string
	rest := make([]string, 0, len(args))
	for _, a := range args {
		if src == "" && a != "" && a[0] != '-' {
			src = a
			continue
		}
		rest = append(rest, a)
	}
	if src == "" {
		return errors.New("restore: give the backup FILE")
	}
	cfg, _, err := LoadConfig("restore", rest, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.StoreURL != "" {
		return errPostgresManaged("restore", "stop every replyd box, then `pg_restore --clean --if-exists --dbname=… "+src+"` with a dump `replyd backup` (pg_dump) made")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	// Hold the lock of the current file while replacing it, so a running
	// replyd is detected instead of being pulled out from under.
	if _, err := os.Stat(dbPath(cfg)); err == nil {
		db, err := bolt.Open(dbPath(cfg), bolt.Options{Timeout: 200 * time.Millisecond})
		if err != nil {
			if errors.Is(err, store.ErrLocked) {
				return errors.New("restore: replyd is running on this data directory: stop it first")
			}
			// A damaged current file must not stop a restore.
			fmt.Fprintf(stderr, "restore: the current data file cannot be opened (%v); replacing it\n", err)
		} else {
			db.Close()
		}
	}
	if err := bolt.Restore(src, dbPath(cfg)); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(stdout, "restore: %s now holds the backup %s\n", dbPath(cfg), src)
	return nil
}

func verifyModels(dir string, stdout io.Writer) error {
	results, err := models.Verify(dir)
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range results {
		fmt.Fprintln(stdout, r.String())
		if !r.OK() {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("models verify: %d file(s) did not match the manifest", bad)
	}
	return nil
}
