//go:build !unix

package regular

// nonblock: no FIFOs to wait on here.
const nonblock = 0
