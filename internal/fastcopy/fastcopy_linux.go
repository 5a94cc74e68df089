package fastcopy

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// systemPath is Linux's fast path: O_DIRECT writes, EINVAL when a filesystem accepts
// O_DIRECT at open but not the writes, sync_file_range to start writeback early, and
// fdatasync to flush as the stream goes.
var systemPath = osPath{
	// The file is opened again through its descriptor (/proc/self/fd), never by its name:
	// whatever is at the name now (a link put in its place) is never what gets written.
	openDirect: func(f *os.File) (*os.File, error) {
		d, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_WRONLY|unix.O_DIRECT, 0)
		if err != nil {
			return nil, err
		}
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Fstat(int(d.Fd()), &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			d.Close()
			return nil, errors.New("fastcopy: the file reopened is not the file")
		}
		return d, nil
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
