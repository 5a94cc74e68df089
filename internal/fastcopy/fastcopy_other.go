//go:build !linux

package fastcopy

// systemPath: without Linux's direct I/O and sync_file_range, chunks go through the page
// cache and the final fsync writes them back.
var systemPath = portablePath
