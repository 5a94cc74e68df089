package fastcopy

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// systemPath is Linux's fast path: O_DIRECT writes, EINVAL when a filesystem accepts
// O_DIRECT at open but not the writes, copy_file_range for copies inside the kernel, and
// sync_file_range to start writeback early.
var systemPath = osPath{
	openDirect: func(name string) (*os.File, error) {
		return os.OpenFile(name, os.O_WRONLY|unix.O_DIRECT, 0)
	},
	refused: func(err error) bool { return errors.Is(err, unix.EINVAL) },
	copyRange: func(src *os.File, srcOff int64, dst *os.File, dstOff int64, n int) error {
		for n > 0 {
			k, err := unix.CopyFileRange(int(src.Fd()), &srcOff, int(dst.Fd()), &dstOff, n, 0)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return &os.PathError{Op: "copy_file_range", Path: dst.Name(), Err: err}
			case k == 0:
				return &os.PathError{Op: "copy_file_range", Path: src.Name(), Err: io.ErrUnexpectedEOF}
			}
			n -= k
		}
		return nil
	},
	writeback: func(f *os.File, off, n int64) {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	},
	await: func(f *os.File, off, n int64) {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	},
	device: func(f *os.File) (uint64, bool) {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil {
			return 0, false
		}
		return uint64(st.Dev), true
	},
}
