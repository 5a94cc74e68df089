package atomicfile

import (
	"os"
	"sync"
)

// umask is the process's file mode creation mask, read once (see readUmask).
var umask = sync.OnceValue(readUmask)

// fileMode is the mode a new regular file gets, as os.Create gives it: 0666 less the umask.
// Temporary files are created private (0600); a committed output gets this mode.
func fileMode() os.FileMode { return 0o666 &^ umask() }

// dirMode is the mode a new folder gets, as os.Mkdir gives it: 0777 less the umask.
func dirMode() os.FileMode { return 0o777 &^ umask() }
