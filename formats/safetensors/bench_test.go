package safetensors

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Environment of the read benchmark; bench.sh sets them.
const (
	// benchFileEnv names an existing file for BenchmarkRead to read instead of a generated one.
	benchFileEnv = "CKPT_BENCH_SAFETENSORS"
	// benchWriteEnv makes TestWriteBenchFile write a benchmark file at that path, of
	// benchSizeEnv bytes of tensor data (default 2 GiB).
	benchWriteEnv = "CKPT_BENCH_WRITE"
	benchSizeEnv  = "CKPT_BENCH_SIZE"
)

// benchTensor is the size of each tensor of a benchmark file: a 4096×8192 BF16 matrix.
const benchTensor = 4096 * 8192 * 2

// randomSource writes n pseudo-random bytes, repeating a 1 MiB block.
type randomSource struct {
	n    int64
	seed uint64
}

func (s randomSource) WriteTo(w io.Writer) (int64, error) {
	block := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(s.seed, 0))
	for i := 0; i < len(block); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			block[i+j] = byte(v >> (8 * j))
		}
	}
	var done int64
	for done < s.n {
		m, err := w.Write(block[:min(int64(len(block)), s.n-done)])
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// writeBenchFile writes a safetensors file of size/benchTensor BF16 matrices with ckpt's writer.
func writeBenchFile(tb testing.TB, path string, size int64) {
	tb.Helper()
	var plan []TensorInfo
	for i := range max(1, size/benchTensor) {
		plan = append(plan, TensorInfo{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: "BF16", Shape: []int64{4096, 8192}})
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, plan, map[string]string{"format": "pt"})
	if err != nil {
		tb.Fatal(err)
	}
	for i, ti := range plan {
		if err := w.WriteTensor(ti.Name, randomSource{benchTensor, uint64(i)}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestWriteBenchFile writes the file bench.sh reads; it runs only when CKPT_BENCH_WRITE is set.
func TestWriteBenchFile(t *testing.T) {
	path := os.Getenv(benchWriteEnv)
	if path == "" {
		t.Skip(benchWriteEnv + " not set")
	}
	size := int64(2 << 30)
	if s := os.Getenv(benchSizeEnv); s != "" {
		var err error
		if size, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	writeBenchFile(t, path, size)
}

// touchWriter discards what it is given after reading one byte of every 4 KiB page, so that
// a mapped tensor is really faulted in and read.
type touchWriter struct{ sum byte }

func (w *touchWriter) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += 4096 {
		w.sum ^= p[i]
	}
	return len(p), nil
}

// sink keeps the benchmark's reads observable.
var sink byte

// BenchmarkRead opens a safetensors file and streams every tensor through WriteTo, touching
// every page. It reads $CKPT_BENCH_SAFETENSORS if set, else a generated 256 MiB file.
func BenchmarkRead(b *testing.B) {
	path := os.Getenv(benchFileEnv)
	if path == "" {
		path = filepath.Join(b.TempDir(), "bench.safetensors")
		writeBenchFile(b, path, 256<<20)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	for b.Loop() {
		ck, err := Open(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		ts, err := ck.Tensors()
		if err != nil {
			b.Fatal(err)
		}
		var tw touchWriter
		var since int64
		for _, nt := range ts {
			n, err := nt.Tensor.WriteTo(&tw)
			if err != nil {
				b.Fatal(err)
			}
			// Drop consumed pages as a streaming consumer (ckpt convert) does, so resident
			// memory does not grow with the file.
			if since += n; since >= 64<<20 {
				ck.ReleaseMemory()
				since = 0
			}
		}
		sink ^= tw.sum
		if err := ck.Close(); err != nil {
			b.Fatal(err)
		}
	}
	// Peak RSS counts the mapped file pages, which belong to the page cache; the process's own
	// (anonymous) memory is what the zero-copy design keeps small.
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
				kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				b.ReportMetric(kib/1024, "anon-MiB")
			}
		}
	}
}

// BenchmarkReadHeader parses the header of a file with 20,000 tensors, about the size of a
// large model's shard index, to keep the token-stream parser's cost in view.
func BenchmarkReadHeader(b *testing.B) {
	var plan []TensorInfo
	for i := range 20000 {
		plan = append(plan, TensorInfo{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", i/256, i%256), DType: "BF16", Shape: []int64{0, 7168}})
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, plan, map[string]string{"format": "pt"})
	if err != nil {
		b.Fatal(err)
	}
	for _, ti := range plan {
		if err := w.WriteTensor(ti.Name, bytes.NewReader(nil)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ReadHeader(bytes.NewReader(data), int64(len(data))); err != nil {
			b.Fatal(err)
		}
	}
}
