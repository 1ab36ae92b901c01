package models

import (
	"errors"
	"testing"
)

func TestPlanSwitch(t *testing.T) {
	const mib = 1 << 20
	unknown := errors.New("no /proc/meminfo")
	for _, c := range []struct {
		name     string
		mode     string
		file     int64
		avail    int64
		availErr error
		gpu      bool
		want     string // the mode, or the error's sentinel below
		wantErr  error
		reason   string
	}{
		{"fits", "", 400 * mib, 2000 * mib, nil, false, "beside", nil,
			"the new model needs about 564 MiB and 2000 MiB are available: it loads beside the old one"},
		{"does not fit", "auto", 400 * mib, 500 * mib, nil, false, "swap", nil,
			"the new model needs about 564 MiB but only 500 MiB are available: the old model is unloaded first"},
		{"memory unknown", "", 400 * mib, 0, unknown, false, "swap", nil,
			"the available memory is unknown (no /proc/meminfo): the old model is unloaded first"},
		{"on a GPU", "", 400 * mib, 64000 * mib, nil, true, "swap", nil,
			"the language model runs on the GPU, whose free memory replyd cannot read: the old model is unloaded first"},
		{"swap asked for", "swap", 400 * mib, 2000 * mib, nil, false, "swap", nil,
			"the new model needs about 564 MiB and 2000 MiB are available, but swap was asked for: the old model is unloaded first"},
		{"beside asked for, fits", "beside", 400 * mib, 2000 * mib, nil, false, "beside", nil, ""},
		{"beside asked for, no room", "beside", 400 * mib, 500 * mib, nil, false, "", ErrNoRoom, ""},
		{"bad mode", "fast", 1, 2000 * mib, nil, false, "", ErrUnusable, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := PlanSwitch(c.mode, c.file, SwitchHeadroom, c.avail, c.availErr, c.gpu)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil || got.Mode != c.want {
				t.Fatalf("PlanSwitch = %+v, %v; want mode %s", got, err, c.want)
			}
			if c.reason != "" && got.Reason != c.reason {
				t.Errorf("reason %q\nwant   %q", got.Reason, c.reason)
			}
			if got.BytesNeeded != c.file+c.file/4+SwitchHeadroom {
				t.Errorf("bytes needed %d", got.BytesNeeded)
			}
		})
	}
}

func TestMemAvailable(t *testing.T) {
	n, err := MemAvailable()
	if err != nil {
		t.Skipf("no MemAvailable here: %v", err)
	}
	if n <= 0 {
		t.Errorf("MemAvailable = %d", n)
	}
}
