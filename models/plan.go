package models

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// How a switch decides whether the new model fits beside the old one: the
// new file's bytes (its weights, read or mapped whole) plus a quarter of
// them and a headroom for the context, the KV cache and the compute
// buffers (SwitchHeadroom), against the memory the kernel says is
// available now (MemAvailable of /proc/meminfo, which counts the page cache
// it can drop). A language model on a GPU backend takes the GPU's memory,
// which replyd cannot read here: such a switch unloads first.
//
// Whisper's headroom is larger: its encoder's scratch for a 30 s window and
// its decoder's K/V take about 70 MiB whatever the file's size (n_audio_ctx
// is 1500 for every Whisper), which a small file's quarter does not cover.
// scripts/bench-model-memory.sh measured a base.en-shaped file (78 MiB)
// peaking at 203 MiB beside the active model, 1.26 times what 64 MiB of
// headroom reserved; a Qwen2.5-0.5B-shaped GGUF (506 MiB) at 0.96 times
// (docs/md).
const (
	SwitchHeadroom        = 64 << 20
	WhisperSwitchHeadroom = 160 << 20
)

// HeadroomFor is the headroom of the engine name ("llm", "stt").
func HeadroomFor(name string) int64 {
	if name == "stt" {
		return WhisperSwitchHeadroom
	}
	return SwitchHeadroom
}

// PlanSwitch decides how a switch to a model file of fileBytes goes: beside
// the old model when it fits in avail (availErr: unknown) and is not on a
// GPU, else with the old one unloaded first; mode ("auto" or "", "beside",
// "swap") may force either, "beside" refusing with ErrNoRoom
// when it does not fit. It fills Mode, Reason, BytesNeeded and
// BytesAvailable.
func PlanSwitch(mode string, fileBytes, headroom, avail int64, availErr error, gpu bool) (Switch, error) {
	out := Switch{BytesNeeded: fileBytes + fileBytes/4 + headroom, BytesAvailable: -1}
	if availErr == nil {
		out.BytesAvailable = avail
	}
	fits := availErr == nil && out.BytesNeeded <= avail && !gpu
	switch mode {
	case "", "auto":
		out.Mode = "swap"
		if fits {
			out.Mode = "beside"
		}
	case "beside":
		if !fits {
			return out, fmt.Errorf("%w: %s", ErrNoRoom, RoomReason(out, availErr, gpu))
		}
		out.Mode = "beside"
	case "swap":
		out.Mode = "swap"
	default:
		return out, fmt.Errorf("%w: mode %q: want auto, beside or swap", ErrUnusable, mode)
	}
	out.Reason = RoomReason(out, availErr, gpu)
	return out, nil
}

// RoomReason says in words why a switch goes beside the old model or not.
func RoomReason(s Switch, availErr error, gpu bool) string {
	switch {
	case gpu:
		return "the language model runs on the GPU, whose free memory replyd cannot read: the old model is unloaded first"
	case availErr != nil:
		return "the available memory is unknown (" + availErr.Error() + "): the old model is unloaded first"
	case s.BytesNeeded <= s.BytesAvailable && s.Mode == "swap":
		return fmt.Sprintf("the new model needs about %d MiB and %d MiB are available, but swap was asked for: the old model is unloaded first", s.BytesNeeded>>20, s.BytesAvailable>>20)
	case s.BytesNeeded <= s.BytesAvailable:
		return fmt.Sprintf("the new model needs about %d MiB and %d MiB are available: it loads beside the old one", s.BytesNeeded>>20, s.BytesAvailable>>20)
	}
	return fmt.Sprintf("the new model needs about %d MiB but only %d MiB are available: the old model is unloaded first", s.BytesNeeded>>20, s.BytesAvailable>>20)
}

// TimeRoomReason says why a candidate cannot be timed beside the active
// model.
func TimeRoomReason(s Switch, availErr error, gpu bool) string {
	switch {
	case gpu:
		return "the language model runs on the GPU, whose free memory replyd cannot read"
	case availErr != nil:
		return "the available memory is unknown (" + availErr.Error() + ")"
	}
	return fmt.Sprintf("it needs about %d MiB but only %d MiB are available", s.BytesNeeded>>20, s.BytesAvailable>>20)
}

// MemAvailable returns MemAvailable of /proc/meminfo in bytes.
func MemAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %q", line)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
