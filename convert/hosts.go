package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Hosts splits a per-device conversion across the machines of a multi-host job, each
// running `ckpt convert` with the same source, options and destination — a folder on a
// file system they all mount, or a bucket prefix (below) — and its own Index:
//
//   - host I writes the files of its devices' ranks only (Target.HostRanks), reading from
//     the source only the byte ranges of the pieces it writes, into the shared partial
//     folder .DST.partial; when its files are durable it seals its share with a part file
//     recording where each item lies, and exits;
//   - host 0, once its own share is sealed, waits (up to Wait) for every other host's part,
//     checks that they belong to this conversion (same source structure, options and
//     layout), writes the layout's index (DCP's .metadata, or sharding.json) and the
//     manifest — hashing each tensor from the files the hosts wrote — and moves the folder
//     into place as DST.
//
// Until then DST does not exist, so a half-finished run cannot pass `ckpt check`. A host
// killed midway is run again with Resume to keep the files it finished; one whose share
// is already sealed has nothing to do; once DST is in place, a host run again finds the
// conversion done and exits successfully.
//
// Into a bucket prefix (gs://, s3://) the hosts share no file system and the prefix plays
// the partial folder's part (storage.JoinOutput; storage/bucket's hosts.go has the
// protocol): each host uploads its files straight to their final names, every object
// carrying the conversion's run — its key (runKey), which every host derives alone, so two
// conversions that differ in source structure, options or host count never adopt each
// other's objects — and journals each one's size and xxhash64 in a control object; its part
// seals its share. Host 0 waits for every part, checks that each host's objects are there
// whole and that the prefix holds nothing else, writes the index, hashes the manifest's
// tensors from the objects the hosts wrote (ranged reads of the whole output, as on a
// file system: no host saw a whole sharded tensor, and xxhash64 digests of pieces do not
// combine), and uploads the manifest last; until then nothing passes `ckpt check`. With
// Resume, a killed host keeps the objects it finished whose size matches the journal, and
// this run's bytes must hash to the journaled xxhash64.
type Hosts struct {
	// Index is this process's host, 0 to Count-1.
	Index int
	// Count is the number of hosts; 0 or 1 means one process writes everything.
	Count int
	// Wait bounds how long host 0 waits for the others (DefaultHostWait when 0).
	Wait time.Duration
}

// DefaultHostWait is how long host 0 waits for the other hosts by default.
const DefaultHostWait = time.Hour

// check validates a multi-host conversion's options.
func (h Hosts) check(t *runtime.Target, lay formats.Layout) error {
	if h.Count <= 1 {
		if h.Index != 0 {
			return fmt.Errorf("host %d of %d: the index counts from 0 to the number of hosts - 1", h.Index, h.Count)
		}
		return nil
	}
	if t.Sharding() == nil || !lay.PerRank() {
		return fmt.Errorf("a multi-host conversion writes a per-device output: give the target a mesh and write dcp or safetensors")
	}
	_, err := t.HostRanks(h.Index, h.Count)
	return err
}

// HostReport is one host's share of a multi-host conversion.
type HostReport struct {
	Index int   `json:"index"`
	Count int   `json:"count"`
	Ranks []int `json:"ranks"`
	// Files and Bytes are the host's own files (its ranks').
	Files []string `json:"files"`
	Bytes int64    `json:"bytes"`
	// Run identifies the conversion the hosts share.
	Run string `json:"run"`
	// Sealed is set when this run wrote the host's files; false when an earlier run had
	// (nothing was written).
	Sealed bool `json:"sealed"`
	// Finished is set on host 0 when it wrote the index and manifest and moved the output
	// into place; Waited is how long it waited for the other hosts, in seconds.
	Finished bool    `json:"finished"`
	Waited   float64 `json:"waited,omitempty"`
	// AlreadyDone is set when the output was already complete: nothing was done.
	AlreadyDone bool `json:"already_done,omitempty"`
}

// hostPart is what a host seals: the run it belongs to and what its layout writer
// reported.
type hostPart struct {
	Run    string          `json:"run"`
	Host   int             `json:"host"`
	Hosts  int             `json:"hosts"`
	Ranks  []int           `json:"ranks"`
	Files  []string        `json:"files"`
	Bytes  int64           `json:"bytes"`
	Layout json.RawMessage `json:"layout"`
}

// runHost performs this host's share of a multi-host conversion (see Hosts).
func runHost(ctx context.Context, opts Options, p *planned, start time.Time) (*Summary, error) {
	h := opts.Hosts
	write := p.lay.Writer()
	ranks, err := opts.Target.HostRanks(h.Index, h.Count)
	if err != nil {
		return nil, err
	}
	run, err := runKey(ctx, p, opts)
	if err != nil {
		return nil, err
	}
	rep := &HostReport{Index: h.Index, Count: h.Count, Ranks: ranks, Run: run}
	p.sum.Host = rep
	done := func() (*Summary, error) {
		p.sum.Seconds = time.Since(start).Seconds()
		return p.sum, nil
	}
	complete := func() bool {
		m, err := manifest.Read(ctx, manifest.PathFor(opts.Dst, true))
		if err != nil || m.Output.Run != run {
			return false
		}
		rep.AlreadyDone, p.sum.Files, p.sum.Manifest = true, m.Output.Files, manifest.PathFor(opts.Dst, true)
		return true
	}
	if complete() {
		return done()
	}
	if err := strict(p, opts); err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, opts, true, h.Index, h.Count, run)
	if err != nil {
		if complete() { // host 0 finished meanwhile
			return done()
		}
		return nil, err
	}
	defer out.abort()
	// Both are reported: a resumed host also removes what it cannot prove finished.
	cleaned, resumed := out.leftovers()
	if cleaned {
		p.sum.Warnings = append(p.sum.Warnings, plan.Warning{Kind: "partial_removed", Message: "removed the files this host's interrupted conversion left"})
	}
	if resumed != nil {
		p.sum.Resumed = len(resumed)
	}
	var hp hostPart
	if b, sealed := out.share.Sealed(); sealed && (json.Unmarshal(b, &hp) != nil || hp.Run != run) {
		// An earlier run's share of another conversion (other source, options or version).
		if err := out.share.Unseal(); err != nil {
			return nil, err
		}
		p.sum.Warnings = append(p.sum.Warnings, plan.Warning{Kind: "partial_removed", Message: "removed this host's files of an earlier, different conversion into the same destination"})
	}
	if _, sealed := out.share.Sealed(); sealed {
		p.sum.Files, p.sum.Bytes = hp.Files, hp.Bytes
		rep.Files, rep.Bytes = hp.Files, hp.Bytes
	} else {
		out.progress.Expect(hostBytes(p, ranks))
		restore := out.reading(p.src)
		wo := p.writeOptions(out, opts)
		wo.Ranks = ranks
		w, err := write(out.root(), p.Output, wo)
		restore()
		if err != nil {
			return nil, err
		}
		out.progress.Finish()
		p.sum.Files, p.sum.Bytes = w.Files, w.Bytes
		rep.Files, rep.Bytes = w.Files, w.Bytes
		if len(w.NotWritten) > 0 {
			p.sum.Warnings = append(p.sum.Warnings, notWritten(w.NotWritten, p.lay))
		}
		if err := strict(p, opts); err != nil {
			return nil, err
		}
		b, err := json.Marshal(hostPart{Run: run, Host: h.Index, Hosts: h.Count, Ranks: ranks, Files: w.Files, Bytes: w.Bytes, Layout: w.Part})
		if err != nil {
			return nil, err
		}
		if err := out.share.Seal(b); err != nil {
			return nil, err
		}
		rep.Sealed = true
	}
	if h.Index != 0 {
		return done()
	}
	waited := time.Now()
	parts, err := waitParts(ctx, out, h, run)
	if err != nil {
		return nil, err
	}
	rep.Waited = time.Since(waited).Seconds()
	// Nothing in the shared folder is read back before every entry is proven a host's.
	written, err := out.written()
	if err != nil {
		return nil, err
	}
	if err := finishHosts(ctx, out, p, opts, parts, run, written); err != nil {
		return nil, err
	}
	if err := out.commit(); err != nil {
		return nil, err
	}
	rep.Finished = true
	return done()
}

// waitParts waits for every host's sealed part, checking that each belongs to run.
func waitParts(ctx context.Context, out *output, h Hosts, run string) ([]hostPart, error) {
	wait := h.Wait
	if wait <= 0 {
		wait = DefaultHostWait
	}
	deadline := time.Now().Add(wait)
	for {
		raw, err := out.share.Parts()
		if err != nil {
			return nil, err
		}
		parts := make([]hostPart, len(raw))
		var missing []int
		for i, b := range raw {
			if b == nil {
				missing = append(missing, i)
				continue
			}
			if err := json.Unmarshal(b, &parts[i]); err != nil {
				return nil, fmt.Errorf("%s: host %d's part: %w", out.dst, i, err)
			}
			if parts[i].Run != run || parts[i].Host != i || parts[i].Hosts != h.Count {
				return nil, fmt.Errorf("%s: host %d's share belongs to another conversion (other source, options, host count or version): every host must run the same command", out.dst, i)
			}
		}
		if len(missing) == 0 {
			return parts, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: hosts %v did not finish within %s; run host 0 again to finish once they have (its own share is kept)", out.dst, missing, wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// finishHosts writes the layout's index from every host's part, then the manifest with
// each tensor hashed from the files the hosts wrote at writtenAt (no host saw a whole
// sharded tensor).
func finishHosts(ctx context.Context, out *output, p *planned, opts Options, parts []hostPart, run, writtenAt string) error {
	layoutParts := make([][]byte, len(parts))
	for i, hp := range parts {
		layoutParts[i] = hp.Layout
	}
	fin, err := p.lay.Finisher()(out.root(), p.Output, p.writeOptions(out, opts), layoutParts)
	if err != nil {
		return fmt.Errorf("%s: %w", opts.Dst, err)
	}
	p.sum.Files, p.sum.Bytes = fin.Files, 0
	for _, hp := range parts {
		p.sum.Bytes += hp.Bytes
	}
	written, err := formats.Open(ctx, writtenAt)
	if err != nil {
		return fmt.Errorf("%s: reading back what the hosts wrote: %w", opts.Dst, err)
	}
	defer written.Close()
	got, err := written.Tensors()
	if err != nil {
		return err
	}
	digests := make([]*xxhash.Digest, len(got))
	for i := range digests {
		digests[i] = xxhash.New()
	}
	if err := statedict.ReadTensors(out.ctx, got, func(i int) io.Writer { return digests[i] }, statedict.ReadOptions{Release: written.ReleaseMemory}); err != nil {
		return err
	}
	byName := make(map[string]uint64, len(got))
	for i, nt := range got {
		byName[nt.Name] = digests[i].Sum64()
	}
	m, err := buildManifest(out, p, opts, fin.Names, func(name string, _ *statedict.Tensor) (uint64, error) {
		sum, ok := byName[name]
		if !ok {
			return 0, fmt.Errorf("not in the output the hosts wrote")
		}
		return sum, nil
	})
	if err != nil {
		return err
	}
	m.Output.Run = run
	path, err := out.writeManifest(out.root(), m)
	p.sum.Manifest = path
	return err
}

// hostBytes is the progress total of a host: the bytes of the pieces its ranks hold.
func hostBytes(p *planned, ranks []int) int64 {
	tensors, _ := p.Output.Tensors()
	var total int64
	seen := map[*statedict.Tensor]bool{}
	for _, nt := range tensors {
		t := nt.Tensor
		if seen[t] {
			continue
		}
		seen[t] = true
		es := int64(t.DType.Size())
		for _, pc := range p.Sharding.Of(t).Pieces {
			if slices.ContainsFunc(pc.Ranks, func(r int) bool { return slices.Contains(ranks, r) }) {
				n := es
				for _, s := range pc.Sizes {
					n *= s
				}
				total += n
			}
		}
	}
	return total
}

// runKey identifies a conversion writing into a bucket prefix — a multi-host one, so that
// host 0 finishes only an output whose shares all come from the same one, or a single
// process's, so that a resume continues only the same conversion: ckpt's version, the
// layout, the hosts, the options that shape the files beyond the tensors (shard size,
// compression, plain data), the source's size, and every written tensor's name, dtype,
// shape, device tag and pieces. (The bytes themselves are not compared: hosts may each read
// their own copy of the source. A single process, which reads one copy, also keys the
// source files' modification times.)
func runKey(ctx context.Context, p *planned, opts Options) (string, error) {
	h := xxhash.New()
	enc := json.NewEncoder(h)
	alone := opts.Hosts.Count <= 1
	size, mtimes, err := sourceStamp(ctx, opts.Src, alone)
	if err != nil {
		return "", err
	}
	mesh, ranks := "", 0
	if opts.Target != nil && opts.Target.Mesh != nil {
		mesh = opts.Target.Mesh.String()
	}
	if p.Sharding != nil {
		ranks = p.Sharding.Ranks
	}
	if err := enc.Encode([]any{opts.ToolVersion, p.lay, max(opts.Hosts.Count, 1), size, mesh, ranks,
		opts.MaxShardSize, opts.Compress, opts.WeightsOnly, opts.Plan.PlainData, mtimes}); err != nil {
		return "", err
	}
	tensors, err := p.Output.Tensors()
	if err != nil {
		return "", err
	}
	for _, nt := range tensors {
		t := nt.Tensor
		loc := ""
		if t.Storage != nil {
			loc = t.Storage.Location
		}
		var pieces any
		if p.Sharding != nil {
			pieces = p.Sharding.Of(t)
		}
		if err := enc.Encode([]any{nt.Name, t.DTypeName(), t.Shape, loc, pieces}); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%016x", h.Sum64()), nil
}

// sourceStamp is the size of the source file, or of the files of a source folder (links
// followed; a bucket source's objects), and with times their modification times by name
// (nil otherwise; a bucket source reports none).
func sourceStamp(ctx context.Context, src string, times bool) (int64, map[string]int64, error) {
	var mtimes map[string]int64
	if times {
		mtimes = map[string]int64{}
	}
	stamp := func(name string, mod time.Time) {
		if times {
			mtimes[name] = mod.UnixNano()
		}
	}
	if storage.IsRemote(src) {
		var n int64
		err := storage.WalkDir(ctx, src, func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err == nil {
				n += info.Size()
				stamp(name, info.ModTime())
			}
			return err
		})
		return n, mtimes, err
	}
	st, err := os.Stat(src)
	if err != nil || !st.IsDir() {
		if err != nil {
			return 0, nil, err
		}
		stamp("", st.ModTime())
		return st.Size(), mtimes, nil
	}
	var n int64
	err = filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
			n += st.Size()
			rel, _ := filepath.Rel(src, path)
			stamp(filepath.ToSlash(rel), st.ModTime())
		}
		return nil
	})
	return n, mtimes, err
}
