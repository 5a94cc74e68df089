//go:build !unix && !windows

package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// lock: this system has no advisory file lock ckpt uses, so a second writer of the same
// destination could not be detected; writing is refused rather than left unguarded.
func lock(*os.File) error {
	return fmt.Errorf("no file locks on %s to keep a second ckpt from writing the same destination: %w", runtime.GOOS, errors.ErrUnsupported)
}
