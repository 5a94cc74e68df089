//go:build !unix

package regular

import "testing"

func mkfifo(t *testing.T, path string) { t.Helper(); t.Skip("no FIFOs here") }
