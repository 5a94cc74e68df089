package forward

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/tinymodel"
)

// heapPeak samples the Go heap every few milliseconds until stop is called, which returns
// the largest in-use size seen.
func heapPeak() (stop func() uint64) {
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

func tokensOf(T, vocab int) []int {
	ids := make([]int, T)
	x := uint64(7)
	for i := range ids {
		x = x*6364136223846793005 + 1442695040888963407
		ids[i] = int(x>>33) % vocab
	}
	return ids
}

// TestLongSequenceBoundedMemory runs 20,000 tokens through a small model with a vocabulary
// of 32,000 and computes every position's logits as ckpt forward does, a block of
// positions at a time: the Go heap must stay under 300 MiB, where one head's [T, T] scores
// alone are 1.6 GB and the logits [T, vocab] 2.6 GB.
func TestLongSequenceBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 positions")
	}
	dir := t.TempDir()
	if err := tinymodel.WriteLlama(dir, tinymodel.Sizes{Vocab: 32000, Hidden: 32, Inter: 48, Layers: 1, Heads: 2, KVHeads: 1, MaxPositions: 64}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const T = 20000
	runtime.GC()
	stop := heapPeak()
	st, err := m.Run(context.Background(), tokensOf(T, 32000))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]float32, 256*32000)
	for t0 := 0; t0 < T; t0 += 256 {
		t1 := min(t0+256, T)
		if err := st.Logits(block[:(t1-t0)*32000], t0, t1); err != nil {
			t.Fatal(err)
		}
		for _, v := range block[:(t1-t0)*32000] {
			if math.IsNaN(float64(v)) {
				t.Fatal("NaN logit")
			}
		}
	}
	peak := stop()
	t.Logf("%d tokens: peak Go heap %.0f MiB", T, float64(peak)/(1<<20))
	if peak > 300<<20 {
		t.Errorf("peak heap %.0f MiB for %d tokens exceeds 300 MiB", float64(peak)/(1<<20), T)
	}
	// Forward, which returns all the logits at once, refuses before allocating when they
	// and the activations exceed the limit.
	m.opts.MemoryLimit = 1 << 30
	if _, err := m.Forward(context.Background(), tokensOf(T, 32000)); err == nil || !strings.Contains(err.Error(), "20000 tokens need about") {
		t.Errorf("Forward of %d tokens under a 1 GiB limit: %v", T, err)
	}
}

// TestBlockedAttentionMatchesEager runs a sequence longer than a key block with the exact
// softmax (one block) and with the online softmax over blocks of 64 keys, full and sliding
// window: the logits must agree to float32 rounding.
func TestBlockedAttentionMatchesEager(t *testing.T) {
	dir := t.TempDir()
	if err := tinymodel.WriteLlama(dir, tinymodel.Sizes{Vocab: 50, Hidden: 32, Inter: 48, Layers: 2, Heads: 4, KVHeads: 2, MaxPositions: 64}); err != nil {
		t.Fatal(err)
	}
	ids := tokensOf(300, 50)
	for _, window := range []int{0, 100} {
		run := func(kb int) []float32 {
			saved := keyBlock
			defer func() { keyBlock = saved }()
			keyBlock = kb
			m, err := Open(context.Background(), dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, b := range m.cfg.Blocks {
				b.Attn.Window = window
			}
			out, err := m.Forward(context.Background(), ids)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		exact, blocked := run(4096), run(64)
		var d, scale float64
		for i := range exact {
			d = max(d, math.Abs(float64(exact[i]-blocked[i])))
			scale = max(scale, math.Abs(float64(exact[i])))
		}
		t.Logf("window %d: max |exact − blocked| %.3g of max |logit| %.3g", window, d, scale)
		if d > 1e-5*scale {
			t.Errorf("window %d: blocked attention departs by %.3g", window, d)
		}
	}
}

// TestMemoryLimitRefusal: a sequence whose activations exceed Options.MemoryLimit is refused
// with an error naming the tokens and the limit, before any allocation.
func TestMemoryLimitRefusal(t *testing.T) {
	dir := t.TempDir()
	if err := tinymodel.WriteLlama(dir, tinymodel.Sizes{Vocab: 50, Hidden: 32, Inter: 48, Layers: 1, Heads: 4, KVHeads: 2, MaxPositions: 64}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(context.Background(), filepath.Join(dir), Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Run(context.Background(), make([]int, 10_000_000))
	if err == nil || !strings.Contains(err.Error(), "10000000 tokens need about") || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("error %v", err)
	}
}
