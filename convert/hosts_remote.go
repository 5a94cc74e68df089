package convert

import (
	"io"
	"path"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/storage"
)

// share is a host's share of a multi-host output: a member of a shared folder
// (*atomicfile.Dir) or of a bucket prefix (storage.SharedOutput, whose protocol is
// storage/bucket's JoinOutput: the prefix stands for the partial folder, control
// objects for the control files, the run — the conversion's key, runKey — for the lock
// and the folder's name).
type share interface {
	Sealed() ([]byte, bool)
	Unseal() error
	Seal(part []byte) error
	Parts() ([][]byte, error)
}

// joinRemote makes o host's share of a multi-host output in a bucket prefix. The run every
// host derives alone from what they share (runKey) identifies the conversion's objects, so
// no host waits for another to learn it; Hosts.Wait bounds how long a host waits for host
// 0 to clear what the prefix held (--force).
func (o *output) joinRemote(opts Options, host, hosts int, run string) error {
	so, err := storage.JoinOutput(o.ctx, opts.Dst, storage.SharedOptions{
		OutputOptions: storage.OutputOptions{Folder: true, Force: opts.Force, Owned: manifest.Owned, Manifest: manifest.Name},
		Host:          host, Hosts: hosts, Run: run, Resume: opts.Resume, Wait: opts.Hosts.Wait,
	})
	if err != nil {
		return err
	}
	o.remote, o.share = so, so
	return nil
}

// leftovers reports what this host found of its own interrupted run: removed (cleaned) or
// kept (resumed: nil without Resume).
func (o *output) leftovers() (cleaned bool, resumed map[string]atomicfile.Journaled) {
	if so, ok := o.share.(storage.SharedOutput); ok {
		if r := so.Resumed(); r != nil {
			resumed = map[string]atomicfile.Journaled{}
			for name, f := range r {
				resumed[name] = atomicfile.Journaled(f)
			}
		}
		return so.CleanedUp(), resumed
	}
	return o.dir.CleanedUp, o.dir.Resumed
}

// written is where host 0 reads back what the hosts wrote, to hash the manifest's tensors:
// the partial folder, or the bucket prefix itself (its objects are at their final names).
func (o *output) written() string {
	if o.dir != nil {
		return o.dir.Path
	}
	return o.dst
}

// resumedRemote is the file name of a bucket output finished by this host's interrupted
// run and kept (its object has the journaled size and the run): what this run would write
// is hashed and must match the journal, as for a resumed local file. Manifests are always
// written anew.
func (o *output) resumedRemote(name string) io.WriteCloser {
	so, ok := o.share.(storage.SharedOutput)
	if !ok || path.Base(name) == manifest.Name || strings.HasSuffix(name, "."+manifest.Name) {
		return nil
	}
	f, ok := so.Resumed()[name]
	if !ok {
		return nil
	}
	return &replayed{o: o, name: name, want: atomicfile.Journaled(f), h: xxhash.New()}
}
