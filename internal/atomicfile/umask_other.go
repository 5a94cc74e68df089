//go:build !unix

package atomicfile

import "os"

// readUmask: systems without a umask create files with the modes asked for.
func readUmask() os.FileMode { return 0 }
