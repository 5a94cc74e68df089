// Package sink holds the decorators a conversion writes its output through, each with one
// job, over one storage.Output whatever the destination (storage/local's folder, file or
// shared folder; a bucket's output):
//
//   - Paged passes every file's bytes on in pieces, checking the context before each and
//     releasing the source's resident pages every releaseEvery bytes streamed;
//   - Replay hashes, instead of writing, a file an interrupted run finished and this one
//     keeps, and requires it to match its journal;
//   - Hold keeps the files meant to be written last (the manifests) in memory for Commit,
//     where the output would make them appear early (a bucket's objects appear as they
//     are uploaded);
//   - Target is the output as the statedict.Output a layout's writer writes (or one file of
//     a folder output as a single-file output of its own), creating no file twice;
//   - Hashes keeps the xxhash64 digest of each tensor (or storage) as the writers feed it
//     through statedict.WriteOptions.Sum, for the manifest; Progress counts those bytes
//     against a total.
//
// A file's own size and xxhash64 are the output's to record (storage.FileSums): a local
// folder journals them as it writes, so that a resumed run can keep the file.
//
// A decorated Output gives the one it wraps back through Unwrap, so its optional abilities
// (storage.Leftovers, FileSums, Staged, Reopener, SharedOutput) are found with storage.As;
// a decorated file writer passes ranges on (statedict.RangeWriter), so that tensor bytes a
// local file reads with pread never pass through memory on the way.
//
// It imports statedict (ranges and their writers), which imports storage: it cannot be
// storage itself.
package sink

import (
	"path"
	"strings"
)

// IsManifest is whether the file name of an output is one of its manifests, named
// manifest (storage.OutputOptions.Manifest, "ckpt-manifest.json"): the output's — in a
// folder, or beside a single file, whose manifest's name is its own followed by "." and
// manifest — or that of a file of it.
func IsManifest(name, manifest string) bool {
	return path.Base(name) == manifest || strings.HasSuffix(name, "."+manifest)
}
