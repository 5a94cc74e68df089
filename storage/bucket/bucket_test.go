package bucket_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/scan"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// fixtures are the held-in families: a torch.save zip, a legacy stream, a sharded HF
// folder, a DCP folder, a Trainer checkpoint folder, an accelerate save_state folder (an
// FSDP model folder and training-state folders), a diffusers pipeline (component folders),
// NeMo 1 archives (a tar read by its headers, tensor-parallel ranks inside), a NeMo 2 folder
// (context/ walked in the bucket) and a per-device folder.
var fixtures = []string{
	"torch/training_cuda.pt",
	"torch/legacy.pt",
	"hf/mistral_sharded",
	"dcp/sharded",
	"ecosystem/folders/trainer/checkpoint-2",
	"ecosystem/folders/accelerate_fsdp",
	"ecosystem/folders/pipeline",
	"ecosystem/megatron/nemo1/model.nemo",
	"ecosystem/megatron/nemo1/tp2.nemo",
	"ecosystem/megatron/nemo2",
	"safetensors",
}

// servers starts a GCS emulator and an S3 server with a bucket "ckpt" each, points the
// clients at them and uploads the fixtures under fixtures/.
func servers(t *testing.T) (gcs, s3 *buckettest.Server) {
	t.Helper()
	gcs, s3 = buckettest.Start(t, "ckpt")
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		for _, f := range fixtures {
			if err := buckettest.PutTree(ctx, filepath.Join("../../testdata", f), scheme+"://ckpt/fixtures/"+f); err != nil {
				t.Fatal(err)
			}
		}
	}
	return gcs, s3
}

// digest is every tensor of ck by name: dtype, shape and the SHA-256 of its bytes.
func digest(t *testing.T, ck *statedict.Checkpoint) map[string]string {
	t.Helper()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, nt := range ts {
		b, err := nt.Tensor.Bytes()
		if err != nil {
			t.Fatalf("%s: %v", nt.Name, err)
		}
		out[nt.Name] = fmt.Sprintf("%s %v %x", nt.Tensor.DTypeName(), nt.Tensor.Shape, sha256.Sum256(b))
	}
	return out
}

// TestOpenEqualsLocal: every fixture family read from GCS and S3 — with a fifth of the
// range reads failing (503, reset connections) or delayed — holds exactly the tensors the
// local read does.
func TestOpenEqualsLocal(t *testing.T) {
	gcs, s3 := servers(t)
	for _, srv := range []*buckettest.Server{gcs, s3} {
		srv.SetFaults(buckettest.Faults{Match: buckettest.Reads, Fail: 0.08, Reset: 0.04, Delay: 0.05, DelayBy: 10 * time.Millisecond, Seed: 3})
	}
	defer func() {
		if gcs.Failed.Load() == 0 || s3.Failed.Load() == 0 {
			t.Errorf("faults injected: GCS %d, S3 %d", gcs.Failed.Load(), s3.Failed.Load())
		}
	}()
	for _, f := range fixtures {
		if f == "safetensors" {
			continue
		}
		local, err := formats.Open(context.Background(), filepath.Join("../../testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		want := digest(t, local)
		local.Close()
		for _, scheme := range []string{"gs", "s3"} {
			url := scheme + "://ckpt/fixtures/" + f
			ck, err := formats.Open(context.Background(), url)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			if ck.Format != local.Format || ck.Path != url {
				t.Errorf("%s: format %s path %s, local %s", url, ck.Format, ck.Path, local.Format)
			}
			got := digest(t, ck)
			ck.Close()
			if len(got) != len(want) {
				t.Errorf("%s: %d tensors, local %d", url, len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: tensor %s differs from the local read", url, k)
				}
			}
		}
	}
}

func TestScanEqualsLocal(t *testing.T) {
	servers(t)
	for _, f := range []string{"torch/training_cuda.pt", "dcp/sharded", "ecosystem/folders/trainer/checkpoint-2", "hf/mistral_sharded"} {
		local, err := scan.Scan(context.Background(), filepath.Join("../../testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		remote, err := scan.Scan(context.Background(), "gs://ckpt/fixtures/"+f)
		if err != nil {
			t.Fatal(err)
		}
		if len(local.Pickles) != len(remote.Pickles) || len(local.Files) != len(remote.Files) || len(local.Problems) != len(remote.Problems) || len(local.Refused()) != len(remote.Refused()) {
			t.Errorf("%s: remote scan found %d pickles, %d files, %d problems; local %d, %d, %d", f, len(remote.Pickles), len(remote.Files), len(remote.Problems), len(local.Pickles), len(local.Files), len(local.Problems))
		}
	}
}

func TestStatReadDir(t *testing.T) {
	servers(t)
	for _, scheme := range []string{"gs", "s3"} {
		root := scheme + "://ckpt/fixtures/hf/mistral_sharded"
		st, err := storage.Stat(context.Background(), root)
		if err != nil || !st.IsDir() {
			t.Fatalf("%s: %v %v", root, st, err)
		}
		st, err = storage.Stat(context.Background(), root+"/config.json")
		if err != nil || st.IsDir() || st.Size() == 0 {
			t.Fatalf("config.json: %v %v", st, err)
		}
		if _, err := storage.Stat(context.Background(), root+"/nothing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing object: %v, want fs.ErrNotExist", err)
		}
		entries, err := storage.ReadDir(context.Background(), scheme+"://ckpt/fixtures")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) != 5 || !entries[0].IsDir() {
			t.Errorf("fixtures/ lists %v", names)
		}
		b, err := storage.ReadFile(context.Background(), root+"/config.json", 1<<20)
		if err != nil || !bytes.Contains(b, []byte("{")) {
			t.Errorf("ReadFile: %q %v", b, err)
		}
	}
}

// TestStreamsStayInTheirRange: a reader streaming through a window in 1 MiB pieces (as
// a conversion reads a tensor) is served exactly the window's bytes — prefetch never
// reaches past its end — and one that stops early costs at most three times what it
// read; a window prefetched before its reader comes (statedict.Prefetcher) is served its
// first block once, read or not; a reader streaming through the object itself is served
// the object once.
func TestStreamsStayInTheirRange(t *testing.T) {
	srv, err := buckettest.GCS("ckpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	for _, kv := range buckettest.Env(srv, nil) {
		t.Setenv(kv[0], kv[1])
	}
	bucket.Default.Close()
	t.Cleanup(func() { bucket.Default.Close() })
	const size = 40<<20 + 12345
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	url := "gs://ckpt/streams/object"
	l, _ := bucket.Parse(url)
	b, err := bucket.Default.Bucket(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(context.Background(), l.Key, data, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := storage.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, ok := f.(statedict.Windower)
	if !ok {
		t.Fatal("an object is not a statedict.Windower")
	}
	// stream reads [from, to) of r in 1 MiB pieces and checks the bytes.
	stream := func(r io.ReaderAt, from, to int64) {
		t.Helper()
		buf := make([]byte, 1<<20)
		for off := from; off < to; off += int64(len(buf)) {
			p := buf[:min(int64(len(buf)), to-off)]
			if n, err := r.ReadAt(p, off); n != len(p) || err != nil && err != io.EOF {
				t.Fatalf("read %d at %d: %d, %v", len(p), off, n, err)
			}
			if !bytes.Equal(p, data[off:off+int64(len(p))]) {
				t.Fatalf("bytes at %d differ", off)
			}
		}
	}
	// lend reads [from, to) of r as fastcopy does through the page cache: lent in place
	// where r lends (each piece checked when lent and again when given back, three held at
	// a time), read where it does not.
	lend := func(r io.ReaderAt, from, to int64) {
		t.Helper()
		type held struct {
			b       []byte
			off     int64
			release func()
		}
		var hold []held
		var lent int64
		giveBack := func(h held) {
			if !bytes.Equal(h.b, data[h.off:h.off+int64(len(h.b))]) {
				t.Fatalf("lent bytes at %d changed before they were given back", h.off)
			}
			h.release()
		}
		for off := from; off < to; {
			b, release, ok, err := r.(statedict.Lender).Lend(off, to-off)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				p := make([]byte, min(1<<20, to-off))
				if _, err := r.ReadAt(p, off); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				b, release = p, func() {}
			} else {
				lent += int64(len(b))
			}
			if len(b) == 0 || !bytes.Equal(b, data[off:off+int64(len(b))]) {
				t.Fatalf("%d bytes lent at %d differ", len(b), off)
			}
			if hold = append(hold, held{b, off, release}); len(hold) > 3 {
				giveBack(hold[0])
				hold = hold[1:]
			}
			off += int64(len(b))
		}
		for _, h := range hold {
			giveBack(h)
		}
		if lent < to-from-1<<20 { // all but a first read of the object, which is no stream
			t.Fatalf("%d of %d bytes lent", lent, to-from)
		}
	}
	before := bucket.OutstandingBuffers()
	for _, c := range []struct {
		name           string
		lo, hi, readTo int64 // the window, and how far the reader goes
		most           int64 // bytes the server may send
		prefetch       bool  // Prefetch is called before reading
		least          int64 // bytes the server must send, when more than the reader reads
		lent           bool  // read through Lend
	}{
		{"whole window", 3<<20 + 17, 29 << 20, 29 << 20, 29<<20 - (3<<20 + 17), false, 0, false},
		{"small window", 1 << 20, 1<<20 + 300<<10, 1<<20 + 300<<10, 300 << 10, false, 0, false},
		{"to the object's end", 30 << 20, size, size, size - 30<<20, false, 0, false},
		{"stopped at 5 MiB", 2 << 20, 38 << 20, 7 << 20, 3 * 5 << 20, false, 0, false},
		// A prefetched window's first block is fetched once, read or not.
		{"prefetched, read", 3<<20 + 17, 29 << 20, 29 << 20, 29<<20 - (3<<20 + 17), true, 0, false},
		{"prefetched, never read", 3 << 20, 29 << 20, 3 << 20, bucket.BlockSize, true, bucket.BlockSize, false},
		{"prefetched small window", 1 << 20, 1<<20 + 300<<10, 1 << 20, 300 << 10, true, 300 << 10, false},
		// Lent in place, a window costs what reading it does.
		{"whole window, lent", 3<<20 + 17, 29 << 20, 29 << 20, 29<<20 - (3<<20 + 17), false, 0, true},
		{"small window, lent", 1 << 20, 1<<20 + 300<<10, 1<<20 + 300<<10, 300 << 10, false, 0, true},
		{"to the object's end, lent", 30 << 20, size, size, size - 30<<20, false, 0, true},
		{"prefetched, lent", 3<<20 + 17, 29 << 20, 29 << 20, 29<<20 - (3<<20 + 17), true, 0, true},
	} {
		srv.Served.Store(0)
		r := w.Window(c.lo, c.hi-c.lo)
		if c.prefetch {
			r.(statedict.Prefetcher).Prefetch()
			time.Sleep(50 * time.Millisecond)
		}
		if c.lent {
			lend(r, c.lo, c.readTo)
		} else {
			stream(r, c.lo, c.readTo)
		}
		f.(io.Closer).Close() // drops what was prefetched and not read
		time.Sleep(50 * time.Millisecond)
		if got := srv.Served.Load(); got < max(c.readTo-c.lo, c.least) || got > c.most {
			t.Errorf("%s: the server sent %d bytes for a read of %d (at most %d)", c.name, got, c.readTo-c.lo, c.most)
		}
	}
	// A reader that says it reads a range whole has it prefetched Ahead blocks deep from
	// its first read (a ramping stream has 3 MiB fetched then), and never past the window.
	for _, plan := range []bool{false, true} {
		lo, hi := int64(2<<20), int64(34<<20)
		r := w.Window(lo, hi-lo)
		srv.Served.Store(0)
		if plan {
			r.(statedict.ReadPlanner).WillRead(lo, hi-lo)
		}
		stream(r, lo, lo+1<<20)
		time.Sleep(100 * time.Millisecond)
		got, want := srv.Served.Load(), int64(1<<20+bucket.Ahead*bucket.BlockSize)
		if plan && got < want || !plan && got >= want {
			t.Errorf("WillRead %v: %d bytes fetched after a first read of 1 MiB (Ahead blocks: %d)", plan, got, want)
		}
		stream(r, lo+1<<20, hi)
		time.Sleep(50 * time.Millisecond)
		if got := srv.Served.Load(); got != hi-lo {
			t.Errorf("WillRead %v: the server sent %d bytes for a window of %d", plan, got, hi-lo)
		}
		f.(io.Closer).Close()
	}
	for _, read := range []func(io.ReaderAt, int64, int64){stream, lend} {
		srv.Served.Store(0)
		read(f, 0, size)
		time.Sleep(50 * time.Millisecond)
		if got := srv.Served.Load(); got != size {
			t.Errorf("streaming the object: the server sent %d bytes of %d", got, size)
		}
	}
	f.(io.Closer).Close()
	time.Sleep(50 * time.Millisecond)
	if n := bucket.OutstandingBuffers(); n != before {
		t.Errorf("%d buffers not given back", n-before)
	}
}

// TestReadCancelled: every call of the client layer takes a context — a ranged read in
// flight against a server that stalls ends within a second of its context's cancellation,
// on GCS and on S3.
func TestReadCancelled(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		l := bucket.Location{Scheme: c.scheme, Bucket: "ckpt", Key: "stall/object"}
		b, err := bucket.Default.Bucket(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(context.Background(), l.Key, make([]byte, 1<<20), bucket.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		c.srv.SetFaults(buckettest.Faults{Match: buckettest.Reads, Delay: 1, DelayBy: 3 * time.Second, Seed: 1})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		err = b.ReadRange(ctx, l.Key, make([]byte, 1<<20), 0)
		took := time.Since(start)
		c.srv.SetFaults(buckettest.Faults{})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: a read cancelled in flight: %v", c.scheme, err)
		}
		if took > 1200*time.Millisecond {
			t.Errorf("%s: the cancelled read returned after %v", c.scheme, took)
		}
	}
}

// TestFileReadCancelled: a read of an opened object — through the object itself and
// through a window of it — is cancelled within a second of the context the object was
// opened with, while the server stalls.
func TestFileReadCancelled(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		l := bucket.Location{Scheme: c.scheme, Bucket: "ckpt", Key: "stall/file"}
		b, err := bucket.Default.Bucket(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(context.Background(), l.Key, make([]byte, 1<<20), bucket.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, window := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			f, err := storage.Open(ctx, l.String())
			if err != nil {
				t.Fatal(err)
			}
			var r io.ReaderAt = f
			if window {
				r = f.(statedict.Windower).Window(0, f.Size())
			}
			c.srv.SetFaults(buckettest.Faults{Match: buckettest.Reads, Delay: 1, DelayBy: 3 * time.Second, Seed: 1})
			time.AfterFunc(200*time.Millisecond, cancel)
			start := time.Now()
			_, err = r.ReadAt(make([]byte, 1<<20), 0)
			took := time.Since(start)
			c.srv.SetFaults(buckettest.Faults{})
			f.Close()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s (window %v): a read cancelled in flight: %v", c.scheme, window, err)
			}
			if took > 1200*time.Millisecond {
				t.Errorf("%s (window %v): the cancelled read returned after %v", c.scheme, window, took)
			}
		}
	}
}
