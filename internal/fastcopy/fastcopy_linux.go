package fastcopy

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// systemPath is Linux's fast path: O_DIRECT writes, EINVAL when a filesystem accepts
// O_DIRECT at open but not the writes, sync_file_range to start writeback early, and
// fdatasync to flush as the stream goes.
var systemPath = osPath{
	openDirect: func(name string) (*os.File, error) {
		return os.OpenFile(name, os.O_WRONLY|unix.O_DIRECT, 0)
	},
	refused: func(err error) bool { return errors.Is(err, unix.EINVAL) },
	writeback: func(f *os.File, off, n int64) {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	},
	await: func(f *os.File, off, n int64) {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	},
	flush: func(f *os.File) error {
		for {
			if err := unix.Fdatasync(int(f.Fd())); !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	},
	device: func(f *os.File) (uint64, bool) {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil {
			return 0, false
		}
		return uint64(st.Dev), true
	},
}
