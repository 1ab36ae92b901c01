package api

// The live session's messages (client.md, "Live session"): the events the
// server sends and their data, the client's controls and payload, and its
// audio frames; live.go runs the socket.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// liveEvent is one server → client message.
type liveEvent struct {
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// endOfTurnEvent is the data of end_of_turn: how much audio the turn holds.
type endOfTurnEvent struct {
	AudioMS int64 `json:"audio_ms"`
}

// liveControl is a client → server text message after the first.
type liveControl struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	// Enabled is the captions control's switch.
	Enabled *bool `json:"enabled"`
}

// captionEvent is the data of caption: the transcript of the turn's audio
// so far, for the page to show while the partner speaks; the turn's
// transcript event replaces it.
type captionEvent struct {
	Text    string `json:"text"`
	AudioMS int64  `json:"audio_ms"`
}

// parseLiveControl decodes a control message. Its errors are *Error with
// code invalid_request; they never quote the message.
func parseLiveControl(data []byte) (liveControl, error) {
	var m liveControl
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return m, jsonError("the control message", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return m, badRequest("a control message must hold exactly one JSON object")
	}
	switch m.Type {
	case "payload":
		if len(bytes.TrimSpace(m.Payload)) == 0 || bytes.Equal(bytes.TrimSpace(m.Payload), []byte("null")) {
			return m, badRequest("a payload control needs payload")
		}
	case "captions":
		if m.Enabled == nil {
			return m, badRequest("a captions control needs enabled (true or false)")
		}
	case "pause", "resume", "end", "ping":
	case "":
		return m, badRequest("type is required (payload, pause, resume, end, ping or captions)")
	default:
		return m, badRequest("type must be payload, pause, resume, end, ping or captions")
	}
	return m, nil
}

// parseLivePayload validates a live session's payload: /v1/infer's payload,
// whose partner turn is the live audio. Steering does not apply (a steered
// request refines an answer; it has no audio).
func parseLivePayload(data []byte, lim Limits) error {
	req, _, err := parsePayload(withLiveTurn(data), lim)
	if err != nil {
		return err
	}
	if req.Steer != nil {
		return badRequest("steer does not apply to a live session; send steered requests to /v1/infer")
	}
	return nil
}

// withLiveTurn returns the payload with the live turn as its only message
// when it has none (a session opened at the start of a conversation): the
// partner's first turn is the dialog. Any other payload, valid or not, is
// returned as it is.
func withLiveTurn(data []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m == nil {
		return data
	}
	if msgs, ok := m["messages"]; ok && !bytes.Equal(bytes.Join(bytes.Fields(msgs), nil), []byte("[]")) && !bytes.Equal(bytes.TrimSpace(msgs), []byte("null")) {
		return data
	}
	m["messages"] = json.RawMessage(`[{"role":"speaker","audio":true}]`)
	out, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return out
}

// pcmFromS16LE converts 16-bit little-endian samples to float32.
func pcmFromS16LE(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out
}

// withTurn is a turn's event data with the turn's number added as the
// field "turn" (the data is a JSON object).
type withTurn struct {
	turn int
	data any
}

func (w withTurn) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.data)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("a live event's data is not a JSON object: %.20s", b)
	}
	head := `{"turn":` + strconv.Itoa(w.turn)
	if len(b) == 2 {
		return []byte(head + "}"), nil
	}
	return append([]byte(head+","), b[1:]...), nil
}
