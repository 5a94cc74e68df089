// Package multihost is the multi-host shared-output protocol, once: the names of the
// control files beside an output being written (each host's journal, part and lock, a
// single process's journal, a bucket prefix's marker), the metadata key that carries the
// run, the journal a host keeps of the files it started and finished (journal.go), the
// protocol's decisions (protocol.go) — what the finisher checks before it commits, what a
// host run again after a kill removes or keeps — and its changes to an output (write.go):
// applying a rerun host's plan, sealing, unsealing, aborting a share, and the order the
// finisher removes the control files in. Its two carriers read and change an output for it
// through a minimal API (Carrier, Writer: list, stat, read a journal or part, remove a
// proven entry, put a control file atomically), each proving entries its own way: a shared
// folder on a file system (internal/atomicfile: inode identities) and a bucket prefix
// (storage/bucket: run metadata on every object). What only one carrier can do stays its
// own: joining (the folder's mkdir and per-host lock files; the bucket's put-if-absent
// marker, waiting for host 0 to clear a prefix, a single process's rules), writing and
// journaling files (a line appended and fsynced, or the list rewritten whole), and the
// final publication (the folder renamed into place holding the other hosts' locks; the
// manifest uploaded, then the marker removed).
package multihost

import (
	"errors"
	"strconv"
	"strings"
)

// ErrUnfinished is a destination holding an interrupted conversion's partial output that
// only resuming that conversion finishes (or replacing it starts over) — on a file system
// and in a bucket alike.
var ErrUnfinished = errors.New("an interrupted conversion's partial output is in the way")

// HostPrefix starts the names of the hosts' control files, .ckpt-host-N.<kind>.
const HostPrefix = ".ckpt-host-"

// The kinds of a host's control files.
const (
	// KindJournal lists the files the host started and finished.
	KindJournal = "journal"
	// KindPart is the host's sealed share: the caller's record of what it wrote.
	KindPart = "part"
	// KindPartTmp is a part being sealed, renamed to KindPart once complete (a file system).
	KindPartTmp = "part.tmp"
	// KindLock is held by the host while it writes (a file system; a bucket has no lock).
	KindLock = "lock"
)

// SingleJournal is the journal of a single process's partial folder on a file system.
const SingleJournal = ".ckpt-journal"

// Marker is the object a bucket prefix holds while an output is written there: it names
// the run (MarkerText, then the run), is created first and removed last.
const Marker = ".ckpt-partial"

// MarkerText starts a Marker's content; the run and a newline follow.
const MarkerText = "ckpt output in progress\nrun "

// RunMetadata is the metadata key under which every object a host uploads carries the run.
const RunMetadata = "ckpt-run"

// StartedSize is the size a journal gives a file started and not finished.
const StartedSize = -1

// Control is the name of host's control file of the given kind.
func Control(host int, kind string) string {
	return HostPrefix + strconv.Itoa(host) + "." + kind
}

// IsControl reports whether name (a name in a partial folder) is a journal or a host's
// control file. The Marker is not: it is the output's, kept by a bucket prefix.
func IsControl(name string) bool {
	return name == SingleJournal || strings.HasPrefix(name, HostPrefix)
}

// MarkerContent is the content of a Marker naming run.
func MarkerContent(run string) []byte { return []byte(MarkerText + run + "\n") }

// ParseMarker returns the run a Marker's content names ("" for none).
func ParseMarker(b []byte) string {
	rest, ok := strings.CutPrefix(string(b), MarkerText)
	if !ok {
		return ""
	}
	run, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(run)
}

// Finished is a file a host finished: its size and the xxhash64 of its bytes, in 16
// lower-case hex digits. In a journal, a file started and not finished has StartedSize
// and no digest.
type Finished struct {
	File     string `json:"file"`
	Size     int64  `json:"size"`
	XXHash64 string `json:"xxhash64"`
}
