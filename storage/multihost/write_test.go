package multihost

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// share is an output where host 0 finished its share and host 1 was stopped mid-upload,
// with another run's object and one nobody's beside them.
func share() *memCarrier {
	mem, _ := shareOf()
	return mem
}

// shareOf is share with host 1, to write on.
func shareOf() (*memCarrier, *host) {
	mem := newMem("run1")
	(&host{c: mem, h: 0}).write("zero.bin", "host 0", true)
	h1 := &host{c: mem, h: 1}
	h1.write("done.bin", "finished", true)
	h1.write("half.bin", "hal", false)
	mem.put("theirs.bin", []byte("theirs"), "run2")
	mem.put("planted.bin", []byte("nobody"), "")
	return mem, h1
}

// TestAbort: an aborted host removes what its journal proves it made, then its journal;
// a sealed share stays whole; a journaled name holding another run's object stays.
func TestAbort(t *testing.T) {
	ctx := context.Background()
	t.Run("unsealed", func(t *testing.T) {
		mem := share()
		if err := Abort(ctx, mem, 1); err != nil {
			t.Fatal(err)
		}
		want := []string{"done.bin", "half.bin", Control(1, KindJournal)}
		if !slices.Equal(mem.removed, want) {
			t.Fatalf("removed %v, want %v", mem.removed, want)
		}
	})
	t.Run("sealed", func(t *testing.T) {
		mem := share()
		(&host{c: mem, h: 1}).seal()
		if err := Abort(ctx, mem, 1); err != nil || mem.removed != nil {
			t.Fatalf("a sealed share: removed %v (%v)", mem.removed, err)
		}
	})
	t.Run("another run's object at a journaled name", func(t *testing.T) {
		mem := share()
		mem.put("half.bin", []byte("theirs"), "run2")
		if err := Abort(ctx, mem, 1); err != nil {
			t.Fatal(err)
		}
		if want := []string{"done.bin", Control(1, KindJournal)}; !slices.Equal(mem.removed, want) {
			t.Fatalf("removed %v, want %v", mem.removed, want)
		}
		if o, _ := mem.get("half.bin"); o.run != "run2" {
			t.Fatal("another run's object was touched")
		}
	})
}

// TestUnseal: a host discarding its sealed share removes its files and part and starts
// its journal afresh; one whose journal names another run's object removes nothing.
func TestUnseal(t *testing.T) {
	ctx := context.Background()
	mem, h1 := shareOf()
	h1.write("half.bin", "half", true)
	h1.seal()
	if err := Unseal(ctx, mem, 1); err != nil {
		t.Fatal(err)
	}
	want := []string{"done.bin", "half.bin", Control(1, KindPart), Control(1, KindJournal)}
	if !slices.Equal(mem.removed, want) {
		t.Fatalf("removed %v, want %v", mem.removed, want)
	}

	mem, h1 = shareOf()
	h1.write("half.bin", "half", true)
	h1.seal()
	mem.put("done.bin", []byte("theirs"), "run2")
	var r *Refusal
	if err := Unseal(ctx, mem, 1); !errors.As(err, &r) || r.Problem != Unproven || mem.removed != nil {
		t.Fatalf("unsealed over another run's object: %v, removed %v", err, mem.removed)
	}
}

// TestApplyFolders: not resuming, the folders a host's journal proves it made go after
// its files, deepest first; resuming they stay for the files written again.
func TestApplyFolders(t *testing.T) {
	for _, resume := range []bool{false, true} {
		mem := newMem("run1")
		mem.objects["a"] = memObject{run: "run1", dir: true}
		mem.objects["a/b"] = memObject{run: "run1", dir: true}
		h := &host{c: mem, h: 1}
		h.write("a/b/x.bin", "x", true)
		h.write("a/y.bin", "y", false)
		j, err := ParseList(mem.objects[Control(1, KindJournal)].data)
		if err != nil {
			t.Fatal(err)
		}
		j.Dirs["a"], j.Dirs["a/b"] = 0, 0
		p, err := Leftovers(context.Background(), mem, 1, j, resume)
		if err != nil {
			t.Fatal(err)
		}
		if err := Apply(context.Background(), mem, p); err != nil {
			t.Fatal(err)
		}
		want := []string{"a/b/x.bin", "a/y.bin", "a/b", "a"}
		if resume {
			want = []string{"a/y.bin"}
		}
		if !slices.Equal(mem.removed, want) {
			t.Errorf("resume %v: removed %v, want %v", resume, mem.removed, want)
		}
	}
}

// TestRetire: the finisher removes the journals before the parts, and the parts before
// the rest, so a kill part way leaves no journal without its part.
func TestRetire(t *testing.T) {
	mem := newMem("run1")
	controls := map[string]Object{}
	for _, name := range []string{Control(0, KindLock), Control(1, KindPart), Control(0, KindJournal), Control(1, KindJournal), Control(0, KindPart)} {
		mem.put(name, []byte("x"), "run1")
		controls[name] = Object{Size: 1, Ref: "run1"}
	}
	if err := Retire(context.Background(), mem, controls); err != nil {
		t.Fatal(err)
	}
	want := []string{Control(0, KindJournal), Control(1, KindJournal), Control(0, KindPart), Control(1, KindPart), Control(0, KindLock)}
	if !slices.Equal(mem.removed, want) {
		t.Fatalf("removed %v, want %v", mem.removed, want)
	}
}

// TestSeal: a host seals its share with its part only when every file its journal
// records started is finished.
func TestSeal(t *testing.T) {
	ctx := context.Background()
	mem, h1 := shareOf()
	if err := Seal(ctx, mem, 1, []byte("part 1")); err == nil || !strings.Contains(err.Error(), "half.bin is not finished") {
		t.Fatalf("sealed a share with a file not finished: %v", err)
	}
	if _, ok := mem.get(Control(1, KindPart)); ok {
		t.Fatal("a refused seal wrote the part")
	}
	h1.write("half.bin", "half", true)
	if err := Seal(ctx, mem, 1, []byte("part 1")); err != nil {
		t.Fatal(err)
	}
	if o, _ := mem.get(Control(1, KindPart)); string(o.data) != "part 1" || o.run != "run1" {
		t.Fatalf("the part: %q of run %q", o.data, o.run)
	}
}

// memPublisher publishes a memCarrier as a bucket's finisher does, recording its steps.
type memPublisher struct {
	*memCarrier
	steps []string
}

func (p *memPublisher) Hold(context.Context) error { p.steps = append(p.steps, "hold"); return nil }

func (p *memPublisher) Publish(context.Context) error {
	p.steps = append(p.steps, "publish")
	p.put("index.json", []byte("{}"), p.run)
	return nil
}

func (p *memPublisher) Finish(context.Context) error {
	p.steps = append(p.steps, "finish")
	p.delete(Marker)
	return nil
}

// TestCommit: the finisher holds the other hosts, verifies, publishes, removes the
// control files (journals, then parts) and ends the publication — in that order; a
// refused output is neither published nor changed.
func TestCommit(t *testing.T) {
	ctx := context.Background()
	mem := newMem("run1")
	mem.put(Marker, MarkerContent("run1"), "run1")
	h0, h1 := &host{c: mem, h: 0}, &host{c: mem, h: 1}
	h0.write("zero.bin", "host 0", true)
	h1.write("one.bin", "host 1", true)
	p := &memPublisher{memCarrier: mem}
	var r *Refusal
	if err := Commit(ctx, p, 0, 2); !errors.As(err, &r) || r.Problem != Unsealed || mem.removed != nil || !slices.Equal(p.steps, []string{"hold"}) {
		t.Fatalf("committed without host 1's part: %v, removed %v, steps %v", err, mem.removed, p.steps)
	}
	h1.seal()
	p.steps = nil
	if err := Commit(ctx, p, 0, 2); err != nil {
		t.Fatal(err)
	}
	if want := []string{"hold", "publish", "finish"}; !slices.Equal(p.steps, want) {
		t.Fatalf("steps %v, want %v", p.steps, want)
	}
	if want := []string{Control(0, KindJournal), Control(1, KindJournal), Control(1, KindPart)}; !slices.Equal(mem.removed, want) {
		t.Fatalf("removed %v, want %v", mem.removed, want)
	}
	if want := []string{"index.json", "one.bin", "zero.bin"}; !slices.Equal(mem.names(), want) {
		t.Fatalf("the output holds %v, want %v", mem.names(), want)
	}
}
