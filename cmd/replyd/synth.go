package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
)

// synthPrefix starts the file name of every model `replyd models synth`
// writes: replyd flags such files as demo models (random weights), as it
// does the demo models.
const synthPrefix = "synth-"

// synthShape is one model shape `replyd models synth` can write.
type synthShape struct {
	what  string   // for the help text
	types []string // weight types the writer can produce, default first
	ext   string
	// write writes the model; tokenizer is the path of Qwen's
	// tokenizer.json (only the Qwen2.5 shapes use it).
	write func(path, typ, tokenizer string) error
	// needsTokenizer marks the shapes written with Qwen's real vocabulary.
	needsTokenizer bool
}

var synthShapes = map[string]synthShape{
	"tiny.en":        whisperShape("Whisper tiny.en (d 384, 4+4 layers)", tinyConfig),
	"base.en":        whisperShape("Whisper base.en (d 512, 6+6 layers)", whisper.BaseENConfig),
	"small.en":       whisperShape("Whisper small.en (d 768, 12+12 layers)", whisper.SmallENConfig),
	"tiny":           whisperShape("Whisper tiny, multilingual (d 384, 4+4 layers, 99 languages)", multilingual(tinyConfig)),
	"base":           whisperShape("Whisper base, multilingual (d 512, 6+6 layers, 99 languages)", multilingual(whisper.BaseENConfig)),
	"small":          whisperShape("Whisper small, multilingual (d 768, 12+12 layers, 99 languages)", multilingual(whisper.SmallENConfig)),
	"large-v3-turbo": whisperShape("Whisper large-v3-turbo, multilingual (d 1280, 32+4 layers, 128 mels, 100 languages)", whisper.LargeV3TurboConfig),
	"qwen2.5-0.5b":   llmShape("Qwen2.5-0.5B-Instruct (width 896, 24 layers, 151936 tokens)", llm.Qwen05BConfig),
	"qwen2.5-1.5b":   llmShape("Qwen2.5-1.5B-Instruct (width 1536, 28 layers, 151936 tokens)", llm.Qwen15BConfig),
}

// tinyConfig is tiny.en's shape with weights of type t.
func tinyConfig(t string) whisper.ModelConfig {
	c := whisper.TinyENConfig()
	c.WeightType = t
	return c
}

// multilingual turns an English-only shape into the multilingual model of
// its size (whisper.Multilingual).
func multilingual(cfg func(string) whisper.ModelConfig) func(string) whisper.ModelConfig {
	return func(t string) whisper.ModelConfig { return whisper.Multilingual(cfg(t)) }
}

// whisperShape writes Whisper models whose text tokens are the generated
// language models' words, so that a random transcript costs the language
// model about as many prompt tokens as real speech of that length.
func whisperShape(what string, cfg func(weightType string) whisper.ModelConfig) synthShape {
	return synthShape{what: what, types: []string{"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16", "f32"}, ext: ".bin",
		write: func(path, typ, _ string) error {
			c := cfg(typ)
			c.Words = llm.DemoWords()
			return whisper.WriteModel(path, c)
		}}
}

func llmShape(what string, cfg func() llm.ModelConfig) synthShape {
	return synthShape{what: what, types: []string{"q8_0", "q4_0", "f16", "f32"}, ext: ".gguf", needsTokenizer: true,
		write: func(path, typ, tokenizer string) error {
			c := cfg()
			c.Quant = typ
			c.Tokenizer = tokenizer
			return llm.WriteModel(path, c)
		}}
}

// synthPath is the file synth writes for shape and weight type in dir.
func synthPath(dir, shape, typ string) string {
	return filepath.Join(dir, synthPrefix+shape+"-"+typ+synthShapes[shape].ext)
}

// cmdModelsSynth writes a random-weight model with the shape of a real one,
// so that a box can be measured before it has real weights.
func cmdModelsSynth(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models synth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	names := make([]string, 0, len(synthShapes))
	for n := range synthShapes {
		names = append(names, n)
	}
	sort.Strings(names)
	shape := fs.String("shape", "", "model shape: "+strings.Join(names, ", "))
	typ := fs.String("type", "q8_0", "weight type (Whisper: q8_0, q4_0, q4_1, q5_0, q5_1, f16, f32; Qwen: q8_0, q4_0, f16, f32)")
	dir := fs.String("dir", filepath.Dir(DefaultLLMModel), "directory to write the model into")
	tokDefault := os.Getenv("REPLYD_QWEN_TOKENIZER")
	if tokDefault == "" {
		tokDefault = filepath.Join("models", "qwen-tokenizer.json")
	}
	tokenizer := fs.String("tokenizer", tokDefault, "Qwen's tokenizer.json, the vocabulary of the Qwen2.5 shapes (scripts/qwen-tokenizer.sh fetches it; env REPLYD_QWEN_TOKENIZER)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: replyd models synth --shape NAME [--type T] [--dir DIR] [--tokenizer FILE]")
		fmt.Fprintln(stderr, "\nWrites a model with random weights and the shape of a real one (for measuring a box; its replies are gibberish):")
		for _, n := range names {
			fmt.Fprintf(stderr, "  %-13s %s\n", n, synthShapes[n].what)
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, ok := synthShapes[*shape]
	if !ok {
		return fmt.Errorf("models synth: --shape must be one of %s", strings.Join(names, ", "))
	}
	known := false
	for _, t := range s.types {
		known = known || t == *typ
	}
	if !known {
		return fmt.Errorf("models synth: the %s writer has no type %q (%s)", *shape, *typ, strings.Join(s.types, ", "))
	}
	if s.needsTokenizer {
		if _, err := os.Stat(*tokenizer); err != nil {
			return fmt.Errorf("models synth: the %s shape is written with Qwen's tokenizer.json, not found at %s (scripts/qwen-tokenizer.sh fetches it; --tokenizer names another)", *shape, *tokenizer)
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("models synth: %w", err)
	}
	path := synthPath(*dir, *shape, *typ)
	t0 := time.Now()
	if err := s.write(path, *typ, *tokenizer); err != nil {
		return fmt.Errorf("models synth: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return errors.Join(errors.New("models synth: the model was not written"), err)
	}
	fmt.Fprintln(stdout, path)
	fmt.Fprintf(stderr, "wrote %s (%s, %s, %d MB) in %d ms: random weights, a demo model for measuring only\n",
		path, *shape, *typ, st.Size()>>20, time.Since(t0).Milliseconds())
	return nil
}
