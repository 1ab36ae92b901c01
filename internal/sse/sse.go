// Package sse reads the Server-Sent Events /v1/infer streams (client.md,
// "Streaming") the way a client does: for replyd's own clients, the
// benchmark tool and the end-to-end tests.
package sse

import (
	"bufio"
	"strings"
)

// Next reads one event: its name and its data line. Lines other than
// `event:` and `data:` are passed over. It returns the reader's error (io.EOF
// at the stream's end) with what the cut event held.
func Next(r *bufio.Reader) (name, data string, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return name, data, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data, nil
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}
