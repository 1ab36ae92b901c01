package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/models/modelfile"
)

// modelsDir is the data directory's models folder, where `replyd models
// add` and the admin API's uploads put model files.
func modelsDir(dataDir string) string { return filepath.Join(dataDir, "models") }

// cmdModelsFolder runs `replyd models add FILE` (copy a model file, from a
// USB stick say, into the data directory's models folder, checked) and
// `replyd models list`.
func cmdModelsFolder(sub string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("REPLYD_DATA_DIR")
	if def == "" {
		def = "./data"
	}
	dataDir := fs.String("data-dir", def, "data directory (REPLYD_DATA_DIR); the files go into its models/ folder")
	name := fs.String("name", "", "file name in the folder (default: the file's own name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	man, err := models.Embedded()
	if err != nil {
		return err
	}
	dir := modelsDir(*dataDir)
	if sub == "list" {
		list, err := modelfile.List(dir, man, nil)
		if err != nil {
			return err
		}
		for _, e := range list {
			fmt.Fprintf(stdout, "%-40s %-8s %12d  %s  %s  %s\n", e.File, e.Kind, e.Bytes, e.SHA256, e.Manifest, e.Check)
		}
		return nil
	}
	if fs.NArg() != 1 {
		return errors.New("models add: give exactly one model file")
	}
	src := fs.Arg(0)
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("models add: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("models add: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("models add: %s is not a regular file", src)
	}
	if *name == "" {
		*name = filepath.Base(src)
	}
	e, err := modelfile.Add(dir, *name, f, modelfile.AddOptions{Size: st.Size(), Manifest: man})
	if err != nil {
		return fmt.Errorf("models add %s: %w", src, err)
	}
	fmt.Fprintf(stdout, "added %s (%s, %s, %d bytes)\nsha256 %s (%s)\n", filepath.Join(dir, e.File), e.Kind, e.Info.Arch, e.Bytes, e.SHA256, e.Manifest)
	for _, n := range e.Info.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return nil
}
