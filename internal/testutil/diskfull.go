package testutil

import (
	"io"
	"os"
	"syscall"
)

// FillingDisk returns a writer that passes room bytes to w, then fails as a
// full disk does: write(2) answering ENOSPC, which os.File wraps in a
// *PathError. The model upload tests (api, models/modelfile) use it.
func FillingDisk(w io.Writer, room int) io.Writer { return &fillingDisk{w: w, room: room} }

type fillingDisk struct {
	w    io.Writer
	room int
}

func (f *fillingDisk) Write(p []byte) (int, error) {
	if len(p) <= f.room {
		f.room -= len(p)
		return f.w.Write(p)
	}
	n, _ := f.w.Write(p[:f.room])
	f.room = 0
	return n, &os.PathError{Op: "write", Path: "model", Err: syscall.ENOSPC}
}
