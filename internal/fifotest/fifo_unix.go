//go:build unix

package fifotest

import (
	"testing"

	"golang.org/x/sys/unix"
)

func mkfifo(t testing.TB, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
