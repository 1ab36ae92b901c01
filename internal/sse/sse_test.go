package sse

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestNext(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("event: transcript\ndata: {\"transcript\":\"Tea?\"}\n\n: a comment\n\nevent: candidates\ndata: {}\n\nevent: cut"))
	for _, want := range [][2]string{{"transcript", `{"transcript":"Tea?"}`}, {"candidates", "{}"}} {
		name, data, err := Next(r)
		if err != nil || name != want[0] || data != want[1] {
			t.Fatalf("Next = %q, %q, %v; want %q, %q", name, data, err, want[0], want[1])
		}
	}
	if _, _, err := Next(r); !errors.Is(err, io.EOF) {
		t.Fatalf("a cut event: %v, want io.EOF", err)
	}
}
