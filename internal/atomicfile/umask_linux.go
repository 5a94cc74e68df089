package atomicfile

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// readUmask reads the umask from /proc/self/status (Linux 4.7+), which, unlike umask(2),
// does not change it even for an instant; it falls back to umask(2).
func readUmask() os.FileMode {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & 0o777
				}
			}
		}
	}
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return os.FileMode(m) & 0o777
}
