package convert

// The bucket emulators this package's test servers run.
import _ "github.com/ckpt-dev/ckpt/internal/buckettest/emulators"
