//go:build !unix && !windows

package atomicfile

import (
	"fmt"
	"os"
	"runtime"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// lock: this system has no advisory file lock ckpt uses, so a second writer of the same
// destination could not be detected; writing is refused rather than left unguarded.
func lock(*os.File) error {
	return fmt.Errorf("no file locks on %s to keep a second ckpt from writing the same destination: %w", runtime.GOOS, ckpterr.ErrUnsupported)
}
