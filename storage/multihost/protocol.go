package multihost

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// The protocol. Every host writes its own files into the output (a partial folder on a
// file system, a bucket prefix) and keeps its journal (journal.go) beside them; once its
// files are all durable it seals its share with its part, the caller's record of what it
// wrote. Host 0, the finisher, waits for every part (Parts), then checks the output
// (Verify) before it commits: every host sealed, every file a journal says finished there
// whole and provably that host's, nothing else. A host run again after being killed finds
// its own leftovers (Leftovers): what its journal proves it made is removed or, resuming,
// kept when finished and unchanged; anything its journal names that it cannot prove it
// made is refused with nothing touched.
//
// The decisions are made here, once, and carried out here (write.go) through a Writer; a
// Carrier reads the output for them, each by its own means: a file system proves an entry
// by the identity (inode) its journal recorded and holds a lock per host, a bucket by the
// run every object carries, its marker naming the run.

// Object is an entry of the output as its carrier finds it.
type Object struct {
	Size int64
	// Dir is a folder (a file system's; a bucket has none).
	Dir bool
	// Ref is the carrier's own description of it (an identity, attributes), given back to
	// the carrier.
	Ref any
}

// Carrier is where an output lies, as the protocol reads it.
type Carrier interface {
	// List returns every entry of the output by slash-separated name: files, folders and
	// control files, but not the carrier's own (a bucket's Marker).
	List(ctx context.Context) (map[string]Object, error)
	// Stat returns the entry name of the output; ok is false when there is none.
	Stat(ctx context.Context, name string) (o Object, ok bool, err error)
	// Journal reads host's journal: nil when there is none, an error when what is there
	// is not a journal that host wrote for this output.
	Journal(ctx context.Context, host int) (*Journal, error)
	// Part reads host's part: nil when it has not sealed its share, an error when what is
	// there is not a part that host wrote for this output.
	Part(ctx context.Context, host int) ([]byte, error)
	// Owns reports whether o, found at name, is provably what host made for this output,
	// j being its journal (nil when it has none). name is a file or folder the journal
	// lists or intends, or one of host's control files other than its journal (its part,
	// a part being sealed, its lock).
	Owns(ctx context.Context, host int, j *Journal, name string, o Object) (bool, error)
}

// Problem is why the protocol refuses to go on.
type Problem int

const (
	// Unsealed: a host has not sealed its share.
	Unsealed Problem = iota + 1
	// ForeignPart: a host's part is not one it wrote for this output.
	ForeignPart
	// Unfinished: a file a host's journal says it finished is not there, not the host's,
	// or not of the size it finished.
	Unfinished
	// Foreign: the output holds entries no host can prove it made (Names, sorted).
	Foreign
	// Unproven: a host's journal names entries, or its part is there, that it cannot
	// prove it made (Names, sorted): its leftovers are not touched.
	Unproven
)

// Refusal is what Verify and Leftovers refuse, worded here; carriers add where (the
// output's path or URL) and their error kinds (IsForeign).
type Refusal struct {
	Problem Problem
	Host    int
	// Names is the file of Unfinished, the entries of Foreign.
	Names []string
	// Size is what the file of Unfinished was finished as.
	Size int64
}

func (r *Refusal) Error() string {
	switch r.Problem {
	case Unsealed:
		return fmt.Sprintf("host %d has not sealed its share", r.Host)
	case ForeignPart:
		return fmt.Sprintf("host %d's part is not one it wrote for this output", r.Host)
	case Unfinished:
		return fmt.Sprintf("host %d's %s is not the %d bytes it finished", r.Host, r.Names[0], r.Size)
	case Unproven:
		return fmt.Sprintf("host %d's journal lists %s, which it cannot prove it made; nothing was removed", r.Host, ListNames(r.Names))
	default:
		return fmt.Sprintf("the output holds %s, which no host of this conversion wrote", ListNames(r.Names))
	}
}

// IsForeign reports whether the refusal is of what a host did not write (rather than of
// a share not finished).
func (r *Refusal) IsForeign() bool { return r.Problem != Unsealed && r.Problem != Unfinished }

// ListNames names up to five entries (sorted in place) and how many more there are.
func ListNames(names []string) string {
	sort.Strings(names)
	if len(names) > 5 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return strings.Join(names, ", ")
}

// Parts returns every host's part in host order, nil for those not sealed yet.
func Parts(ctx context.Context, c Carrier, hosts int) ([][]byte, error) {
	out := make([][]byte, hosts)
	for h := range hosts {
		b, err := c.Part(ctx, h)
		if err != nil {
			return nil, err
		}
		out[h] = b
	}
	return out, nil
}

// Verify checks the output for its finisher, host self of hosts, before anything in it is
// read back or committed: every host other than self has sealed its share with a part it
// wrote (self's own files the finisher knows are closed); every file a host's journal says
// finished is there, provably that host's, of the size journaled; and the output holds
// nothing else but the hosts' control files that are theirs (what no host can prove it
// made is refused by name). It returns the control files, for the commit to remove.
func Verify(ctx context.Context, c Carrier, self, hosts int) (map[string]Object, error) {
	all, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	controls := map[string]Object{}
	proven := map[string]bool{}
	for h := range hosts {
		j, err := c.Journal(ctx, h)
		if err != nil {
			return nil, err
		}
		if o, ok := all[Control(h, KindJournal)]; ok && j != nil {
			controls[Control(h, KindJournal)] = o
		}
		partName := Control(h, KindPart)
		o, ok := all[partName]
		switch {
		case !ok && h != self:
			return nil, &Refusal{Problem: Unsealed, Host: h}
		case ok:
			mine, err := c.Owns(ctx, h, j, partName, o)
			if err != nil {
				return nil, err
			}
			if !mine {
				return nil, &Refusal{Problem: ForeignPart, Host: h}
			}
			controls[partName] = o
		}
		if o, ok := all[Control(h, KindLock)]; ok {
			if mine, err := c.Owns(ctx, h, j, Control(h, KindLock), o); err != nil {
				return nil, err
			} else if mine {
				controls[Control(h, KindLock)] = o
			}
		}
		if j == nil {
			continue
		}
		for _, name := range j.Order {
			e := j.Files[name]
			if !e.Finished {
				continue // what it started and never finished is not its share: foreign if there
			}
			o, ok := all[name]
			mine := false
			if ok && o.Size == e.Size && !o.Dir {
				if mine, err = c.Owns(ctx, h, j, name, o); err != nil {
					return nil, err
				}
			}
			if !mine {
				return nil, &Refusal{Problem: Unfinished, Host: h, Names: []string{name}, Size: e.Size}
			}
			proven[name] = true
		}
		for name := range j.Dirs {
			if o, ok := all[name]; ok && o.Dir {
				if mine, err := c.Owns(ctx, h, j, name, o); err != nil {
					return nil, err
				} else if mine {
					proven[name] = true
				}
			}
		}
	}
	var foreign []string
	for name := range all {
		if _, ok := controls[name]; !ok && !proven[name] {
			foreign = append(foreign, name)
		}
	}
	if len(foreign) > 0 {
		sort.Strings(foreign)
		return nil, &Refusal{Problem: Foreign, Names: foreign}
	}
	return controls, nil
}

// Plan is what a host run again does with what an interrupted run of it left.
type Plan struct {
	// Found is every entry the journal names (files, folders, intended files) that the
	// output holds, each proven the host's.
	Found map[string]Object
	// Controls is the host's part, and a part being sealed (a file system's), when there,
	// each proven the host's.
	Controls map[string]Object
	// Keep is the finished files kept (resuming: still of the size journaled), in the
	// order started.
	Keep []Finished
	// Remove is the files to remove, in the order started: those only intended, then those
	// started and never finished, changed since, or not resumed.
	Remove []string
	// RemoveDirs is the folders found to remove, deepest first, once Remove is removed:
	// every one found when not resuming (a resumed host writes into them again).
	RemoveDirs []string
	// Cleaned is set when Remove holds a file the journal lists (not merely intended).
	Cleaned bool
}

// Leftovers decides what host, run again with its journal j (nil: none), does with what
// its interrupted run, or an earlier run that sealed its share (Plan.Controls holds its
// part), left: with resume the files it finished that are still there whole
// are kept, and every other entry it made is removed. An entry j names, or a part of the
// host, that the output holds and the host cannot prove it made is refused (Unproven, naming
// it) before anything is decided: nothing is removed. A host whose share is sealed keeps
// everything (Apply is not for it; Unseal discards it).
func Leftovers(ctx context.Context, c Carrier, host int, j *Journal, resume bool) (*Plan, error) {
	p := &Plan{Found: map[string]Object{}, Controls: map[string]Object{}}
	var foreign []string
	for _, kind := range []string{KindPart, KindPartTmp} {
		name := Control(host, kind)
		o, ok, err := c.Stat(ctx, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		mine, err := c.Owns(ctx, host, j, name, o)
		if err != nil {
			return nil, err
		}
		if !mine {
			foreign = append(foreign, name)
			continue
		}
		p.Controls[name] = o
	}
	if j == nil {
		if len(foreign) > 0 {
			return nil, &Refusal{Problem: Unproven, Host: host, Names: foreign}
		}
		return p, nil
	}
	found, unproven, err := survey(ctx, c, host, j)
	if err != nil {
		return nil, err
	}
	p.Found = found
	foreign = append(foreign, unproven...)
	if len(foreign) > 0 {
		sort.Strings(foreign)
		return nil, &Refusal{Problem: Unproven, Host: host, Names: foreign}
	}
	intended := ""
	if o, ok := p.Found[j.Intent]; ok && j.Intent != "" && !o.Dir {
		intended = j.Intent
		p.Remove = append(p.Remove, intended)
	}
	for _, name := range j.Order {
		o, ok := p.Found[name]
		if !ok || name == intended {
			continue
		}
		if e := j.Files[name]; resume && e.Finished && !o.Dir && o.Size == e.Size {
			p.Keep = append(p.Keep, Finished{File: name, Size: e.Size, XXHash64: e.XXHash64})
			continue
		}
		p.Remove = append(p.Remove, name)
		p.Cleaned = true
	}
	if !resume {
		for name, o := range p.Found {
			if o.Dir {
				p.RemoveDirs = append(p.RemoveDirs, name)
			}
		}
		deepestFirst(p.RemoveDirs)
	}
	return p, nil
}

// names is every entry j names: its files in the order first recorded, its folders, and
// the file it intended (once).
func (j *Journal) names() []string {
	var names []string
	names = append(names, j.Order...)
	for name := range j.Dirs {
		if _, ok := j.Files[name]; !ok {
			names = append(names, name)
		}
	}
	// The intended file may be one made anew (a finisher's index written again), whose
	// earlier record the journal keeps: it is listed once.
	if _, ok := j.Files[j.Intent]; !ok && j.Intent != "" {
		if _, ok := j.Dirs[j.Intent]; !ok {
			names = append(names, j.Intent)
		}
	}
	return names
}

// survey finds every entry host's journal j names that the output holds: found those
// host proves it made, unproven the others.
func survey(ctx context.Context, c Carrier, host int, j *Journal) (found map[string]Object, unproven []string, err error) {
	found = map[string]Object{}
	for _, name := range j.names() {
		o, ok, err := c.Stat(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		mine, err := c.Owns(ctx, host, j, name, o)
		if err != nil {
			return nil, nil, err
		}
		if !mine {
			unproven = append(unproven, name)
			continue
		}
		found[name] = o
	}
	return found, unproven, nil
}
