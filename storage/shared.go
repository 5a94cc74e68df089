package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// SharedOutput is one host's share of a folder output that several hosts write at once —
// the hosts of a multi-host conversion into a bucket prefix, which share no file system —
// or, as host 0 of 1, a single process's folder output journaled so that a killed run can
// be resumed.
// Each host uploads its own files (Create) and seals its share (Seal) with a record of
// them; host 0, the finisher, waits for every share (Parts), then Commit checks them and
// writes the files given last (the manifest). Abort removes this host's unsealed files;
// a sealed share stays for the finisher.
type SharedOutput interface {
	Output
	// Sealed returns this host's part when its share is sealed, by this run or an
	// earlier one of the same conversion (its files are kept).
	Sealed() ([]byte, bool)
	// Unseal discards this host's sealed share so that it is written anew.
	Unseal() error
	// Seal records part as this host's share, once every file it created is closed.
	Seal(part []byte) error
	// Parts returns every host's part in host order, nil for those not sealed yet.
	Parts() ([][]byte, error)
	// Resumed lists the files an interrupted run of this host finished and this one
	// keeps (SharedOptions.Resume); CleanedUp reports that it removed what such a run
	// left instead.
	Resumed() map[string]Finished
	CleanedUp() bool
}

// Finished is a file a host finished (the protocol's record, defined in multihost).
type Finished = multihost.Finished

// SharedOptions say which share of which conversion a SharedOutput is.
type SharedOptions struct {
	OutputOptions
	// Host is this host, 0 to Hosts-1; host 0 finishes the output. Hosts 1 is a single
	// process, which seals no share and takes over an interrupted run's files only with
	// Resume or Force.
	Host, Hosts int
	// Run identifies the conversion, the same on every host (derived from what the hosts
	// share: the source's structure, the options, the host count).
	Run string
	// Resume keeps the files an interrupted run of this host finished.
	Resume bool
	// Wait bounds how long a host waits for host 0 to clear the destination.
	Wait time.Duration
}

// SharedCreator is a backend that can write shared outputs.
type SharedCreator interface {
	JoinOutput(ctx context.Context, url string, opts SharedOptions) (SharedOutput, error)
}

// JoinOutput starts this host's share of the shared output at url through its backend.
func JoinOutput(ctx context.Context, url string, opts SharedOptions) (SharedOutput, error) {
	b, err := backend(ctx, url)
	if err != nil {
		return nil, err
	}
	c, ok := b.(SharedCreator)
	if !ok {
		return nil, fmt.Errorf("%s: %w: this backend cannot write a multi-host output", url, ckpterr.ErrUnsupported)
	}
	o, err := c.JoinOutput(ctx, url, opts)
	if err != nil || !IsRemote(url) { // a local output is internal/atomicfile's to track
		return o, err
	}
	t := &trackedShared{SharedOutput: o}
	t.tracked = &tracked{o}
	pendingMu.Lock()
	pending[t.tracked] = true
	pendingMu.Unlock()
	return t, nil
}

// trackedShared is a SharedOutput registered in pending until it commits or aborts.
type trackedShared struct {
	SharedOutput
	tracked *tracked
}

func (t *trackedShared) Commit(last []NamedBytes) error { return t.tracked.Commit(last) }
func (t *trackedShared) Abort()                         { t.tracked.Abort() }
