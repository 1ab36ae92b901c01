package disk

import "syscall"

// Free returns the bytes an unprivileged user may still write on the file
// system holding path (statfs(2): available blocks times the block size).
func Free(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
