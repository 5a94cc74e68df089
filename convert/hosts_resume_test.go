package convert

import (
	"context"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/storage/bucket"
	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// TestMultiHostBucketResumeReportsKept: a host killed after one upload finished and while
// another's object had landed whole but was not yet journaled finished (an upload whose
// last request the service completed after the kill) is run again with Resume: the
// finished file is kept and reported kept, the unproven one removed and reported removed.
// (Reporting only the removal hid what was resumed: TestBucketMultiHostKillResume failed
// so under load.)
func TestMultiHostBucketResumeReportsKept(t *testing.T) {
	buckettest.Start(t, "ckpt")
	f := newHostsFixture(t, "cpu", "fsdp=8")
	options := f.options(formats.DCPFolder, 2*time.Second)
	ctx := context.Background()
	dst := "gs://ckpt/resume-kept"
	if sum, err := Run(ctx, options(dst, 1, 2)); err != nil || !sum.Host.Sealed {
		t.Fatalf("host 1: %v", err)
	}
	// Make it the share of a host killed midway: no part, its last file only started.
	b, key := openBucket(t, dst)
	jkey := key + "/" + multihost.Control(1, multihost.KindJournal)
	a, err := b.Attributes(ctx, jkey)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.ReadAll(ctx, jkey, multihost.MaxJournal)
	if err != nil {
		t.Fatal(err)
	}
	j, err := multihost.ParseList(raw)
	if err != nil {
		t.Fatal(err)
	}
	entries := j.Entries()
	if len(entries) < 2 {
		t.Fatalf("host 1 wrote %d files", len(entries))
	}
	entries[len(entries)-1].Size, entries[len(entries)-1].XXHash64 = multihost.StartedSize, ""
	killed, err := multihost.MarshalList(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, jkey, killed, bucket.PutOptions{Metadata: a.Metadata}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, key+"/"+multihost.Control(1, multihost.KindPart)); err != nil {
		t.Fatal(err)
	}
	o := options(dst, 1, 2)
	o.Resume = true
	sum, err := Run(ctx, o)
	if err != nil || !sum.Host.Sealed {
		t.Fatalf("host 1 resumed: %v", err)
	}
	removed := false
	for _, w := range sum.Warnings {
		removed = removed || w.Kind == "partial_removed"
	}
	if sum.Resumed != len(entries)-1 || !removed {
		t.Fatalf("resumed %d files (want %d), removal reported %v: %+v", sum.Resumed, len(entries)-1, removed, sum.Warnings)
	}
}
