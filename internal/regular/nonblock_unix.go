//go:build unix

package regular

import "syscall"

// nonblock makes an open return at once on a FIFO with no writer.
const nonblock = syscall.O_NONBLOCK
