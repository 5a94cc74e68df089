package multihost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// memCarrier is an output in memory, as a bucket prefix holds one: every object carries
// the run that wrote it, which is its proof.
type memCarrier struct {
	mu      sync.Mutex
	run     string
	objects map[string]memObject
	// removed is every name Remove removed, in order.
	removed []string
}

type memObject struct {
	data []byte
	run  string
	dir  bool // a folder, as a file system has
}

var errForeign = errors.New("foreign")

func newMem(run string) *memCarrier { return &memCarrier{run: run, objects: map[string]memObject{}} }

func (c *memCarrier) put(name string, data []byte, run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects[name] = memObject{data: data, run: run}
}

func (c *memCarrier) get(name string) (memObject, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objects[name]
	return o, ok
}

func (c *memCarrier) delete(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objects, name)
}

func (c *memCarrier) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.objects))
}

func (c *memCarrier) List(context.Context) (map[string]Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]Object{}
	for name, o := range c.objects {
		if name != Marker {
			out[name] = Object{Size: int64(len(o.data)), Dir: o.dir, Ref: o.run}
		}
	}
	return out, nil
}

func (c *memCarrier) Stat(_ context.Context, name string) (Object, bool, error) {
	o, ok := c.get(name)
	return Object{Size: int64(len(o.data)), Dir: o.dir, Ref: o.run}, ok, nil
}

func (c *memCarrier) Journal(_ context.Context, host int) (*Journal, error) {
	o, ok := c.get(Control(host, KindJournal))
	if !ok {
		return nil, nil
	}
	if o.run != c.run {
		return nil, fmt.Errorf("host %d's journal: %w", host, errForeign)
	}
	return ParseList(o.data)
}

func (c *memCarrier) Part(_ context.Context, host int) ([]byte, error) {
	o, ok := c.get(Control(host, KindPart))
	if !ok {
		return nil, nil
	}
	if o.run != c.run {
		return nil, fmt.Errorf("host %d's part: %w", host, errForeign)
	}
	return o.data, nil
}

func (c *memCarrier) Owns(_ context.Context, host int, _ *Journal, name string, o Object) (bool, error) {
	if IsControl(name) && name != Control(host, KindPart) {
		return false, nil
	}
	return o.Ref == c.run, nil
}

// Remove removes name while it is still an object of the run (o, as found, its proof);
// a folder only when nothing lies beneath it.
func (c *memCarrier) Remove(_ context.Context, name string, o Object) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.objects[name]
	if !ok {
		return nil
	}
	if o.Ref != c.run || got.run != c.run || got.dir != o.Dir {
		return fmt.Errorf("%s: %w: not an object of this run", name, errForeign)
	}
	if got.dir {
		for other := range c.objects {
			if strings.HasPrefix(other, name+"/") {
				return fmt.Errorf("%s: a folder holding %s", name, other)
			}
		}
	}
	delete(c.objects, name)
	c.removed = append(c.removed, name)
	return nil
}

// Put writes name whole as an object of the run.
func (c *memCarrier) Put(_ context.Context, _ int, name string, data []byte) error {
	c.put(name, data, c.run)
	return nil
}

func (c *memCarrier) ResetJournal(ctx context.Context, host int) error {
	return c.RemoveJournal(ctx, host)
}

func (c *memCarrier) RemoveJournal(ctx context.Context, host int) error {
	o, _, _ := c.Stat(ctx, Control(host, KindJournal))
	return c.Remove(ctx, Control(host, KindJournal), o)
}

// host writes one host's share into a memCarrier as a bucket host does: each file
// journaled as started before its upload and as finished after it.
type host struct {
	c       *memCarrier
	h       int
	journal []Finished
}

func (h *host) record(e Finished) {
	i := slices.IndexFunc(h.journal, func(f Finished) bool { return f.File == e.File })
	if i < 0 {
		h.journal = append(h.journal, e)
	} else {
		h.journal[i] = e
	}
	b, err := MarshalList(h.journal)
	if err != nil {
		panic(err)
	}
	h.c.put(Control(h.h, KindJournal), b, h.c.run)
}

// write uploads name; a kill before its end (finish false) leaves what was uploaded.
func (h *host) write(name, data string, finish bool) {
	h.record(Finished{File: name, Size: StartedSize})
	h.c.put(name, []byte(data), h.c.run)
	if finish {
		h.record(Finished{File: name, Size: int64(len(data)), XXHash64: "0123456789abcdef"})
	}
}

func (h *host) seal() { h.c.put(Control(h.h, KindPart), []byte(fmt.Sprintf("part %d", h.h)), h.c.run) }

// rejoin is the host run again: its journal read, its leftovers decided and carried out.
func rejoin(t *testing.T, c *memCarrier, h int, resume bool) (*host, *Plan, error) {
	t.Helper()
	ctx := context.Background()
	j, err := c.Journal(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	p, err := Leftovers(ctx, c, h, j, resume)
	if err != nil {
		return nil, nil, err
	}
	if err := Apply(ctx, c, p); err != nil {
		return nil, nil, err
	}
	r := &host{c: c, h: h}
	for _, e := range p.Keep {
		r.record(e)
	}
	return r, p, nil
}

// TestLeftovers: a host killed mid-upload and run again removes what it started and, with
// resume, keeps what it finished that is still whole; anything its journal names that
// another run wrote is refused by name with nothing removed; the other host's files are
// never touched.
func TestLeftovers(t *testing.T) {
	for _, c := range []struct {
		name    string
		resume  bool
		plant   func(c *memCarrier)
		keep    []string
		left    []string
		cleaned bool
		foreign []string
	}{
		{name: "start over", left: []string{"zero.bin"}, cleaned: true},
		{name: "resume", resume: true, keep: []string{"done.bin"}, left: []string{"done.bin", "zero.bin"}, cleaned: true},
		{name: "resume a file changed since", resume: true, plant: func(c *memCarrier) { c.put("done.bin", []byte("longer now"), "run1") },
			left: []string{"zero.bin"}, cleaned: true},
		{name: "a journaled name holding another run's object", resume: true, plant: func(c *memCarrier) { c.put("half.bin", []byte("theirs"), "run2") },
			foreign: []string{"half.bin"}},
		{name: "a part of another run", plant: func(c *memCarrier) { c.put(Control(1, KindPart), []byte("forged"), "run2") },
			foreign: []string{Control(1, KindPart)}},
		{name: "a part of another run, and no journal", plant: func(c *memCarrier) {
			c.delete(Control(1, KindJournal))
			c.put(Control(1, KindPart), []byte("forged"), "run2")
		}, foreign: []string{Control(1, KindPart)}},
		{name: "nothing left of a started file", resume: true, plant: func(c *memCarrier) { c.delete("half.bin") },
			keep: []string{"done.bin"}, left: []string{"done.bin", "zero.bin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := newMem("run1")
			(&host{c: mem, h: 0}).write("zero.bin", "host 0", true)
			h1 := &host{c: mem, h: 1}
			h1.write("done.bin", "finished", true)
			h1.write("half.bin", "hal", false) // killed here
			if c.plant != nil {
				c.plant(mem)
			}
			before := mem.names()
			_, p, err := rejoin(t, mem, 1, c.resume)
			if c.foreign != nil {
				var r *Refusal
				if !errors.As(err, &r) || r.Problem != Unproven || !slices.Equal(r.Names, c.foreign) {
					t.Fatalf("refused %v, want %v", err, c.foreign)
				}
				if got := mem.names(); !slices.Equal(got, before) {
					t.Fatalf("a refusal changed %v into %v", before, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, e := range p.Keep {
				kept = append(kept, e.File)
			}
			if !slices.Equal(kept, c.keep) || p.Cleaned != c.cleaned {
				t.Errorf("kept %v (cleaned %v), want %v (%v)", kept, p.Cleaned, c.keep, c.cleaned)
			}
			var data []string
			for _, n := range mem.names() {
				if !IsControl(n) {
					data = append(data, n)
				}
			}
			if !slices.Equal(data, c.left) {
				t.Errorf("left %v, want %v", data, c.left)
			}
		})
	}
}

// TestVerify: the finisher commits only when every other host sealed its share with a
// part of this run, every file a journal finished is there whole and of this run, and
// nothing else lies in the output — refusals name what is wrong.
func TestVerify(t *testing.T) {
	for _, c := range []struct {
		name    string
		change  func(c *memCarrier)
		problem Problem
		host    int
		names   []string
	}{
		{name: "every share sealed"},
		{name: "a planted object", change: func(c *memCarrier) { c.put("evil.bin", []byte("x"), "") }, problem: Foreign, names: []string{"evil.bin"}},
		{name: "objects another run left", change: func(c *memCarrier) {
			c.put("old/a.bin", []byte("x"), "run0")
			c.put(Control(2, KindJournal), []byte("[]"), "run0")
		}, problem: Foreign, names: []string{Control(2, KindJournal), "old/a.bin"}},
		{name: "a planted lock", change: func(c *memCarrier) { c.put(Control(1, KindLock), nil, "run1") }, problem: Foreign, names: []string{Control(1, KindLock)}},
		{name: "a started file's leftover", change: func(c *memCarrier) { c.put("half.bin", []byte("hal"), "run1") }, problem: Foreign, names: []string{"half.bin"}},
		{name: "a part of another run", change: func(c *memCarrier) { c.put(Control(1, KindPart), []byte("forged"), "run2") }, problem: ForeignPart, host: 1},
		{name: "a finished file replaced", change: func(c *memCarrier) { c.put("b.bin", []byte("host 1"), "run2") }, problem: Unfinished, host: 1, names: []string{"b.bin"}},
		{name: "a finished file cut short", change: func(c *memCarrier) { c.put("b.bin", []byte("host"), "run1") }, problem: Unfinished, host: 1, names: []string{"b.bin"}},
		{name: "a finished file gone", change: func(c *memCarrier) { c.delete("b.bin") }, problem: Unfinished, host: 1, names: []string{"b.bin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := newMem("run1")
			mem.put(Marker, MarkerContent("run1"), "run1")
			h0, h1 := &host{c: mem, h: 0}, &host{c: mem, h: 1}
			h0.write("a.bin", "host 0", true)
			h1.write("b.bin", "host 1", true)
			h1.record(Finished{File: "half.bin", Size: StartedSize})
			h1.seal()
			if c.change != nil {
				c.change(mem)
			}
			controls, err := Verify(context.Background(), mem, 0, 2)
			if c.problem == 0 {
				if err != nil {
					t.Fatal(err)
				}
				got := slices.Sorted(maps.Keys(controls))
				if want := []string{Control(0, KindJournal), Control(1, KindJournal), Control(1, KindPart)}; !slices.Equal(got, want) {
					t.Fatalf("controls %v, want %v", got, want)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Problem != c.problem || r.Host != c.host || !slices.Equal(r.Names, c.names) {
				t.Fatalf("%v (%+v), want problem %d of host %d naming %v", err, r, c.problem, c.host, c.names)
			}
		})
	}
}

// TestFinisherWaitsForParts: until every other host has sealed, Parts has a hole and
// Verify names the first host missing; the finisher's own part is not needed (its files
// are closed), and once all are there it commits.
func TestFinisherWaitsForParts(t *testing.T) {
	ctx := context.Background()
	mem := newMem("run1")
	hosts := []*host{{c: mem, h: 0}, {c: mem, h: 1}, {c: mem, h: 2}}
	for _, h := range hosts {
		h.write(fmt.Sprintf("__%d_0.distcp", h.h), "bytes", true)
	}
	for _, sealed := range [][]int{{}, {2}, {2, 1}} {
		for _, h := range sealed {
			hosts[h].seal()
		}
		parts, err := Parts(ctx, mem, 3)
		if err != nil {
			t.Fatal(err)
		}
		var have []int
		for h, p := range parts {
			if p != nil {
				have = append(have, h)
			}
		}
		sort.Ints(sealed)
		if !slices.Equal(have, sealed) {
			t.Errorf("sealed %v: parts of %v", sealed, have)
		}
		_, err = Verify(ctx, mem, 0, 3)
		var r *Refusal
		switch {
		case len(sealed) < 2 && (!errors.As(err, &r) || r.Problem != Unsealed || r.Host != 1):
			t.Errorf("sealed %v: %v, want host 1 unsealed", sealed, err)
		case len(sealed) == 2 && err != nil:
			t.Errorf("sealed %v: %v", sealed, err)
		}
	}
	// A part another run left is refused as Parts reads it.
	mem.put(Control(2, KindPart), []byte("forged"), "run2")
	if _, err := Parts(ctx, mem, 3); !errors.Is(err, errForeign) {
		t.Errorf("a forged part: %v", err)
	}
}

// TestLeftoversIntended: a kill between a file's creation and the record of it (a file
// system's window, covered by an intent) leaves a file the journal only intended, in a
// folder it made: the file is removed, the folder found (the carrier removes it once
// empty), and neither is resumed; an intended name holding another run's file is refused.
func TestLeftoversIntended(t *testing.T) {
	j := newJournal()
	j.Dirs["sub"] = 1
	j.Intent = "sub/x.bin"
	j.Files["a.bin"] = Entry{ID: 2, Finished: true, Size: 1, XXHash64: "0123456789abcdef"}
	j.Order = []string{"a.bin"}
	for _, run := range []string{"run1", "run2"} {
		mem := newMem("run1")
		mem.objects["sub"] = memObject{run: "run1", dir: true}
		mem.put("sub/x.bin", nil, run)
		mem.put("a.bin", []byte("a"), "run1")
		p, err := Leftovers(context.Background(), mem, 0, j, true)
		if run == "run2" {
			var r *Refusal
			if !errors.As(err, &r) || !slices.Equal(r.Names, []string{"sub/x.bin"}) {
				t.Errorf("another run's file at an intended name: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Remove, []string{"sub/x.bin"}) || p.Cleaned || len(p.Keep) != 1 || p.Keep[0].File != "a.bin" {
			t.Errorf("remove %v (cleaned %v), keep %v", p.Remove, p.Cleaned, p.Keep)
		}
		if _, ok := p.Found["sub"]; !ok || len(p.Found) != 3 {
			t.Errorf("found %v", slices.Sorted(maps.Keys(p.Found)))
		}
	}
}

// TestLeftoversStaleIntent: only the last intent not followed by its file's record is a
// kill's window: an intent another overtook (a creation that failed) is forgotten, and one
// its file's record followed is done (atomicfile's TestStaleIntent shows an empty file at
// a forgotten intent refused). A file made anew after its first record (an index written
// again) that the intent names is removed, not kept.
func TestLeftoversStaleIntent(t *testing.T) {
	var lines []byte
	for _, r := range []Record{{Intent: "x.bin"}, {Intent: "a.bin"}, {File: "a.bin", Ino: 2}, {File: "a.bin", Ino: 2, Size: 1, XXHash64: "0123456789abcdef"}} {
		b, _ := json.Marshal(r)
		lines = append(append(lines, b...), '\n')
	}
	j := newJournal()
	for _, line := range bytes.Split(bytes.TrimSpace(lines), []byte("\n")) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if err := j.add(r, func(string) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	if j.Intent != "" {
		t.Fatalf("intent %q after its file's record", j.Intent)
	}
	j.Intent = "a.bin" // made anew: the intent again, no record yet
	mem := newMem("run1")
	mem.put("a.bin", nil, "run1")
	p, err := Leftovers(context.Background(), mem, 0, j, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Remove, []string{"a.bin"}) || len(p.Keep) != 0 {
		t.Errorf("made anew: remove %v, keep %v", p.Remove, p.Keep)
	}
}

// FuzzProtocol: whatever journal a host finds (as anyone with write access could leave
// it), Leftovers never plans to remove or keep an object the journal does not name or
// this run did not write, carrying the plan out (Apply) or aborting the host removes
// nothing else, and Verify never accepts an output holding an object this run did not
// write.
func FuzzProtocol(f *testing.F) {
	f.Add([]byte(`[{"file":"mine.bin","size":4,"xxhash64":"0123456789abcdef"},{"file":"theirs.bin","size":-1}]`), true)
	f.Add([]byte(`[{"file":"mine.bin","size":-1},{"file":"sub/deep.bin","size":1,"xxhash64":"0123456789abcdef"}]`), false)
	f.Add([]byte(`[{"file":"planted.bin","size":6,"xxhash64":"0123456789abcdef"}]`), true)
	f.Fuzz(func(t *testing.T, journal []byte, resume bool) {
		mem := newMem("run1")
		mem.put("mine.bin", []byte("mine"), "run1")
		mem.put("sub/deep.bin", []byte("d"), "run1")
		mem.put("theirs.bin", []byte("theirs"), "run2")
		mem.put("planted.bin", []byte("nobody"), "")
		mem.put(Control(1, KindJournal), journal, "run1")
		mem.put(Control(0, KindJournal), []byte(`[]`), "run1")
		j, err := mem.Journal(context.Background(), 1)
		if err != nil || j == nil {
			return
		}
		if p, err := Leftovers(context.Background(), mem, 1, j, resume); err == nil {
			for _, name := range p.Remove {
				_, listed := j.Files[name]
				if o, _ := mem.get(name); o.run != "run1" || !listed && name != j.Intent {
					t.Fatalf("plans to remove %s (run %q), which the journal does not prove", name, o.run)
				}
			}
			for _, e := range p.Keep {
				if o, _ := mem.get(e.File); o.run != "run1" || int64(len(o.data)) != e.Size {
					t.Fatalf("keeps %s (run %q, %d bytes)", e.File, o.run, len(o.data))
				}
			}
		}
		// Carried out, the plan and an abort remove only objects of this run the journal
		// names: the memory carrier refuses any other removal, failing them.
		if p, err := Leftovers(context.Background(), mem, 1, j, resume); err == nil {
			if err := Apply(context.Background(), mem, p); err != nil {
				t.Fatalf("applying the plan: %v", err)
			}
		}
		if err := Abort(context.Background(), mem, 1); err != nil {
			t.Fatalf("abort: %v", err)
		}
		for _, name := range mem.removed {
			_, listed := j.Files[name]
			if !listed && name != j.Intent && name != Control(1, KindJournal) {
				t.Fatalf("removed %s, which the journal does not name", name)
			}
		}
		for _, name := range []string{"theirs.bin", "planted.bin", Control(0, KindJournal)} {
			if _, ok := mem.get(name); !ok {
				t.Fatalf("removed %s, which this host did not write", name)
			}
		}
		mem.put(Control(1, KindPart), []byte("part 1"), "run1")
		if _, err := Verify(context.Background(), mem, 0, 2); err == nil {
			t.Fatalf("accepted an output holding another run's object and a planted one")
		}
	})
}
