package multihost

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// The protocol's changes to an output, made here once over a Writer: what a host run
// again removes (Apply), what an aborted host removes (Abort), what a host discarding its
// sealed share removes (Unseal) and the order the finisher removes the control files in
// (Retire), and how a host seals its share (Seal). Every removal is of an entry the protocol found and proved the host's (Owns),
// given back to the carrier as its proof: nothing another run or nobody wrote is touched.

// Writer is a Carrier the protocol also changes: the least it needs to carry its
// decisions out. What stays the carrier's own — joining (a file system's partial folder
// and per-host locks; a bucket's marker), writing files and journaling them, sealing, and
// the final publication (a rename into place; a manifest then the marker) — is not here.
type Writer interface {
	Carrier
	// Remove removes the entry name only while it is still o, as the protocol found and
	// proved it: a file system by its identity (inode, kind) through no link, a bucket
	// only an object carrying the run. A folder is removed only when empty (one holding
	// anything is an error naming it). A name already gone is not an error.
	Remove(ctx context.Context, name string, o Object) error
	// ResetJournal starts host's journal afresh, recording nothing of its files (a file
	// system keeps the record of the lock the host holds; a bucket removes the journal,
	// which reads as none).
	ResetJournal(ctx context.Context, host int) error
	// RemoveJournal removes host's journal, the one this host wrote.
	RemoveJournal(ctx context.Context, host int) error
	// Put writes host's control file name whole and atomically, recording it as host's:
	// nothing is at name until all of data is durable there (a file system writes a
	// temporary file it journals, then renames it; a bucket puts one object carrying the
	// run).
	Put(ctx context.Context, host int, name string, data []byte) error
}

// Seal seals host's share with part, the caller's record of what it wrote, written
// atomically for the finisher. Every file host's journal records started must be
// finished: a share holding a file not complete is refused, nothing written.
func Seal(ctx context.Context, w Writer, host int, part []byte) error {
	j, err := w.Journal(ctx, host)
	if err != nil {
		return err
	}
	if j != nil {
		for _, name := range j.Order {
			if !j.Files[name].Finished {
				return fmt.Errorf("host %d cannot seal its share: %s is not finished", host, name)
			}
		}
	}
	return w.Put(ctx, host, Control(host, KindPart), part)
}

// Apply carries out p, a plan Leftovers made for a host whose share is not sealed: the
// files of p.Remove in order, then the folders of p.RemoveDirs (deepest first), each only
// while it is still the entry found.
func Apply(ctx context.Context, w Writer, p *Plan) error {
	for _, name := range p.Remove {
		if err := w.Remove(ctx, name, p.Found[name]); err != nil {
			return err
		}
	}
	for _, name := range p.RemoveDirs {
		if err := w.Remove(ctx, name, p.Found[name]); err != nil {
			return err
		}
	}
	return nil
}

// deepestFirst sorts folder names so that each comes before the folders holding it.
func deepestFirst(dirs []string) {
	sort.Slice(dirs, func(a, b int) bool {
		if da, db := strings.Count(dirs[a], "/"), strings.Count(dirs[b], "/"); da != db {
			return da > db
		}
		return dirs[a] < dirs[b]
	})
}

// Unseal discards host's sealed share — an earlier run's, of another conversion — so that
// it writes its share anew: every file and folder its journal proves it made is removed,
// then its part, and its journal starts afresh. An entry it cannot prove it made is
// refused (Unproven) with nothing removed.
func Unseal(ctx context.Context, w Writer, host int) error {
	j, err := w.Journal(ctx, host)
	if err != nil {
		return err
	}
	p, err := Leftovers(ctx, w, host, j, false)
	if err != nil {
		return err
	}
	if err := Apply(ctx, w, p); err != nil {
		return err
	}
	if o, ok := p.Controls[Control(host, KindPart)]; ok {
		if err := w.Remove(ctx, Control(host, KindPart), o); err != nil {
			return err
		}
	}
	return w.ResetJournal(ctx, host)
}

// Abort ends host's writing without finishing the output: a share sealed with its part
// stays for the finisher; otherwise every file and folder its journal proves it made is
// removed (what it cannot prove stays), then its journal — unless something it made
// could not be removed, so that a later run removes the rest.
func Abort(ctx context.Context, w Writer, host int) error {
	j, err := w.Journal(ctx, host)
	if err != nil || j == nil {
		return err
	}
	name := Control(host, KindPart)
	if o, ok, err := w.Stat(ctx, name); err != nil {
		return err
	} else if ok {
		if mine, err := w.Owns(ctx, host, j, name, o); err != nil || mine {
			return err
		}
	}
	found, _, err := survey(ctx, w, host, j)
	if err != nil {
		return err
	}
	var first error
	var dirs []string
	for _, name := range j.names() {
		o, ok := found[name]
		switch {
		case !ok:
		case o.Dir:
			dirs = append(dirs, name)
		default:
			if err := w.Remove(ctx, name, o); err != nil && first == nil {
				first = err
			}
		}
	}
	deepestFirst(dirs)
	for _, name := range dirs {
		if err := w.Remove(ctx, name, found[name]); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return w.RemoveJournal(ctx, host)
}

// Retire removes the control files Verify returned, for the finisher publishing the
// output: the journals first, then the parts, then the rest (a file system's locks). A
// kill part way thus never leaves a host's journal without the part that seals its share
// — which would make that host, run again, take the published files for its leftovers —
// only parts without journals, which prove nothing and are refused, never acted on.
func Retire(ctx context.Context, w Writer, controls map[string]Object) error {
	rank := func(name string) int {
		switch {
		case strings.HasSuffix(name, "."+KindJournal):
			return 0
		case strings.HasSuffix(name, "."+KindPart):
			return 1
		}
		return 2
	}
	names := make([]string, 0, len(controls))
	for name := range controls {
		names = append(names, name)
	}
	sort.Slice(names, func(a, b int) bool {
		if ra, rb := rank(names[a]), rank(names[b]); ra != rb {
			return ra < rb
		}
		return names[a] < names[b]
	})
	for _, name := range names {
		if err := w.Remove(ctx, name, controls[name]); err != nil {
			return err
		}
	}
	return nil
}

// Publisher is a Writer whose output its finisher can publish: the steps of a commit that
// only the carrier can take, which Commit puts in order around the protocol's own.
type Publisher interface {
	Writer
	// Hold keeps every other host from writing until the commit ends: a file system takes
	// their locks (waiting a moment for a host that sealed its share to exit); a bucket,
	// which has no lock, holds nothing (each host runs once at a time).
	Hold(ctx context.Context) error
	// Publish readies the verified output before its control files go: a bucket uploads
	// the manifest, which makes the prefix a complete output; a file system makes every
	// file durable and proves again the destination it replaces.
	Publish(ctx context.Context) error
	// Finish ends the publication once the control files are gone: a file system renames
	// the partial folder into place (after checking nothing else of a host's is left); a
	// bucket removes its marker, last.
	Finish(ctx context.Context) error
}

// Commit finishes the output for its finisher, host self of hosts (self's own files it
// knows are closed; -1 when its part is checked like any other's): the other hosts held
// (Hold), the output checked (Verify), published (Publish), its control files removed in
// Retire's order, and the publication ended (Finish). Nothing is removed before the
// output is verified; a refusal leaves everything for another attempt.
func Commit(ctx context.Context, p Publisher, self, hosts int) error {
	if err := p.Hold(ctx); err != nil {
		return err
	}
	controls, err := Verify(ctx, p, self, hosts)
	if err != nil {
		return err
	}
	if err := p.Publish(ctx); err != nil {
		return err
	}
	if err := Retire(ctx, p, controls); err != nil {
		return err
	}
	return p.Finish(ctx)
}
