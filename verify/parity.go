package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/internal/plural"

	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// ParityOptions configure Parity.
type ParityOptions struct {
	// Conversion is how DST was made from SRC. nil reads it from DST's manifest when DST has
	// one (its recorded command line), else assumes Standard.
	Conversion *Conversion
	// Manifest is the manifest to read the conversion from ("" finds DST's own; "-" reads
	// none).
	Manifest string
}

// ParityReport is what Parity found; it is also `ckpt verify --json`'s "tensors" section.
type ParityReport struct {
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	SrcFormat string `json:"src_format"`
	DstFormat string `json:"dst_format"`
	// Manifest is the manifest the conversion's options were read from ("" when none).
	Manifest string `json:"manifest,omitempty"`
	// Conversion is the conversion assumed, as convert flags.
	Conversion string `json:"conversion"`
	// Pairs counts the source tensors found in DST and compared; Exact, Cast and
	// Dequantized split them by how the expected value was computed (bytes as stored, a
	// float cast as torch rounds it, a quantized group as its reference dequantizer
	// computes it). Equal counts those whose every element matched.
	Pairs       int `json:"pairs"`
	Equal       int `json:"equal"`
	Exact       int `json:"exact"`
	Cast        int `json:"cast"`
	Dequantized int `json:"dequantized"`
	// Tied lists names present on one side only that view the same bytes as a paired
	// tensor of the same side (lm_head.weight tied to the embedding): "alias → kept".
	Tied []string `json:"tied,omitempty"`
	// Dropped lists source tensors DST does not have that a conversion leaves out by
	// default (CUDA RNG states), when the conversion's options are not recorded.
	Dropped []string `json:"dropped,omitempty"`
	// Replicas counts the further copies of replicated pieces a per-device output holds
	// (one per rank that loads it) compared with the same expected values.
	Replicas int `json:"replicas,omitempty"`
	// Bytes is the size of the destination tensors compared.
	Bytes int64 `json:"bytes"`
	// Values counts the non-tensor values (counters, schedules, hyperparameters) found
	// equal when DST holds a whole tree (torch.save, DCP); NotCompared counts those a
	// tensors-only DST (safetensors) cannot hold.
	Values      int             `json:"values"`
	NotCompared int             `json:"not_compared,omitempty"`
	Problems    []ParityProblem `json:"problems"`
	Warnings    []string        `json:"warnings,omitempty"`
	// Alongside are the reports of the training-state files an HF Trainer folder output
	// carries (optimizer.pt, scheduler.pt, rng_state.pth, …), each against the source
	// folder's file.
	Alongside []*ParityReport `json:"alongside,omitempty"`
}

// ParityProblem is one way DST differs from what the conversion of SRC should hold.
type ParityProblem struct {
	// Tensor is the name in DST (as the conversion names it) of the tensor or non-tensor
	// value; Source the source tensor's name when it differs.
	Tensor string `json:"tensor"`
	Source string `json:"source,omitempty"`
	// Piece names a rank's copy of a piece of the tensor, in a per-device output whose
	// ranks each hold their own copy ("rank 5's copy of the piece at [0 16]"); Index is then
	// still the element's index in the whole tensor, Flat its position in the piece.
	Piece string `json:"piece,omitempty"`
	// Kind is "missing" (expected, not in DST), "extra" (in DST, not expected), "dtype",
	// "shape", "value" (elements differ) or "uncomparable".
	Kind string `json:"kind"`
	// Want and Got are the expected and found dtype (a string) or shape (a list of ints;
	// for a rank's copy, "dtype [shape]" text); for a tensor's "value", the first differing
	// element's expected and found values as text, exactly ("0.5 (0x3f000000)"); for a
	// non-tensor value ("missing", "extra", "value"), the values themselves, typed
	// (statedict.JSON); for "uncomparable", Got says why.
	Want any `json:"want,omitempty"`
	Got  any `json:"got,omitempty"`
	// Expected says how the expected value was computed: "exact", "cast float32 →
	// bfloat16", "dequantized fp8-block → bfloat16".
	Expected string `json:"expected,omitempty"`
	// Index is the first differing element's index, Flat its row-major position; Differ
	// counts the differing elements of Elements, MaxAbsDiff is the largest absolute
	// difference among them (float dtypes).
	Index      []int64 `json:"index,omitempty"`
	Flat       int64   `json:"flat,omitempty"`
	Differ     int64   `json:"differ,omitempty"`
	Elements   int64   `json:"elements,omitempty"`
	MaxAbsDiff float64 `json:"max_abs_diff,omitempty"`
	// NonFinite is set when an element is NaN or infinite on one side only.
	NonFinite bool `json:"non_finite,omitempty"`
}

// String describes the problem on one line.
func (p ParityProblem) String() string {
	name := p.Tensor
	if p.Source != "" {
		name += " (source " + p.Source + ")"
	}
	if p.Piece != "" {
		name += ", " + p.Piece
	}
	switch p.Kind {
	case "missing":
		return name + ": missing from the destination"
	case "extra":
		return name + ": in the destination, not in the source"
	case "dtype", "shape":
		return fmt.Sprintf("%s: %s %s, expected %s", name, p.Kind, display(p.Got), display(p.Want))
	case "value":
		s := fmt.Sprintf("%s: %d of %d elements differ; first at %v: expected %s, got %s [%s]",
			name, p.Differ, p.Elements, p.Index, display(p.Want), display(p.Got), p.Expected)
		switch {
		case p.NonFinite:
			s += "; non-finite values on one side"
		case p.MaxAbsDiff != 0:
			s += fmt.Sprintf("; max abs diff %g", p.MaxAbsDiff)
		}
		return s
	}
	return fmt.Sprintf("%s: %s %s", name, p.Kind, display(p.Got))
}

// display writes a problem's Want or Got for people: text as it is, typed values as JSON.
func display(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// OK reports parity: every expected tensor in DST with the expected dtype, shape and value,
// nothing else, in DST and in every training-state file taken along.
func (r *ParityReport) OK() bool {
	for _, a := range r.Alongside {
		if !a.OK() {
			return false
		}
	}
	return len(r.Problems) == 0
}

// Err is nil on parity, else an error naming the first problem that matches ErrFailed.
func (r *ParityReport) Err() error {
	if len(r.Problems) > 0 {
		return fmt.Errorf("%s vs %s: %s; first: %s: %w", r.Src, r.Dst, plural.Of(len(r.Problems), "problem"), r.Problems[0], ErrFailed)
	}
	for _, a := range r.Alongside {
		if err := a.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Parity checks that the checkpoint at dst holds exactly what converting the one at src
// should give: every source tensor (model weights, optimizer state, buffers, RNG states)
// paired with its converted counterpart through the conversion's renames, the stripping of
// wrapper prefixes and the dropping of tied aliases; its dtype and shape as expected; its
// value bit for bit the source's where the conversion is lossless, or exactly the rounded
// value where it casts (codec.CastStorage of the source, as torch's Tensor.to) or
// dequantizes (the group's reference dequantizer, quant.Group.Dequantize) — and nothing else
// in dst; non-tensor values too where dst holds a whole tree. Both sides are opened with
// formats.Open, so any two formats compare, and Parity also answers "are these two
// checkpoints the same model?". A per-device output is read as the logical tensors its
// reader reassembles from the ranks' shards (a multi-rank DCP directory, a per-device
// safetensors folder); where each rank keeps its own copy of a replicated piece
// (sharding.json), every copy is compared too, each against its box of the expected tensor.
//
// Every tensor is read once, on every core, through statedict.ReadTensors, the other side
// at the same offsets; resident memory stays bounded whatever the checkpoints' size.
func Parity(ctx context.Context, src, dst string, opts ParityOptions) (*ParityReport, error) {
	conv, mpath, warn, err := conversionFor(ctx, dst, opts)
	if err != nil {
		return nil, err
	}
	rep, err := parity(ctx, src, dst, conv)
	if err != nil {
		return nil, err
	}
	rep.Manifest = mpath
	rep.Warnings = append(warn, rep.Warnings...)
	return rep, nil
}

// conversionFor decides the conversion to check against.
func conversionFor(ctx context.Context, dst string, opts ParityOptions) (*Conversion, string, []string, error) {
	if opts.Conversion != nil {
		return opts.Conversion, "", nil, nil
	}
	if opts.Manifest == "-" {
		return Standard(), "", nil, nil
	}
	mpath := opts.Manifest
	if mpath == "" {
		p, err := manifest.Find(ctx, dst)
		if err != nil {
			return nil, "", nil, err
		}
		if _, err := storage.Stat(ctx, p); err != nil {
			return Standard(), "", nil, nil
		}
		mpath = p
	}
	m, err := manifest.Read(ctx, mpath)
	if err != nil {
		return nil, "", nil, err
	}
	conv, warn, err := FromManifest(m)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", mpath, err)
	}
	return conv, mpath, warn, nil
}

// dstTensor is a destination tensor, or the logical tensor of a destination quantized group
// (compared with a source that holds it unpacked).
type dstTensor struct {
	t     *statedict.Tensor
	group *quant.Group
	used  bool
}

func parity(ctx context.Context, src, dst string, conv *Conversion) (*ParityReport, error) {
	sck, err := conv.openSource(ctx, src)
	if err != nil {
		return nil, err
	}
	defer sck.Close()
	dck, err := openOutput(ctx, dst)
	if err != nil {
		return nil, err
	}
	defer dck.Close()
	rep := &ParityReport{Src: src, Dst: dst, SrcFormat: sck.Format, DstFormat: dck.Format, Conversion: conv.String(), Problems: []ParityProblem{}}
	dts, err := dck.Tensors()
	if err != nil {
		return nil, err
	}
	byName := map[string]*dstTensor{}
	var order []string
	for _, nt := range dts {
		byName[nt.Name] = &dstTensor{t: nt.Tensor}
		order = append(order, nt.Name)
	}
	ex, err := expect(sck, conv, func(name string, d statedict.DType) bool {
		x, ok := byName[name]
		return ok && x.t.DType == d
	})
	if err != nil {
		return nil, err
	}
	rep.Warnings = append(rep.Warnings, ex.warnings...)
	// A quantized destination compared with an unquantized source: its groups are compared
	// as their logical tensors, dequantized to the source's dtype.
	if _, splan, _ := quant.DetectCheckpoint(sck); splan == nil {
		if _, dplan, err := quant.DetectCheckpoint(dck); err == nil && dplan != nil {
			order = logicalGroups(dplan, byName, order)
		}
	}
	ets, err := (&statedict.Checkpoint{Root: ex.root}).Tensors()
	if err != nil {
		return nil, err
	}
	canon := map[string][]string{}
	for _, n := range order {
		canon[canonical(n)] = append(canon[canonical(n)], n)
	}
	var cs []*comparison
	var pairs []pairing
	paired := map[*statedict.Tensor]bool{}
	var unpaired []statedict.NamedTensor
	for _, e := range ets {
		d, name := byName[e.Name], e.Name
		if d == nil || d.used {
			if alt := canon[canonical(e.Name)]; len(alt) == 1 && !byName[alt[0]].used {
				d, name = byName[alt[0]], alt[0]
			}
		}
		if d == nil || d.used {
			unpaired = append(unpaired, e)
			continue
		}
		d.used = true
		paired[e.Tensor] = true
		p := pairing{name: name, e: e.Tensor, d: d}
		if o := originOf(e.Tensor); o != nil && o.name != name {
			p.source = o.name
		}
		c, prob := p.plan(conv)
		if prob != nil {
			rep.Problems = append(rep.Problems, *prob)
			continue
		}
		rep.Pairs++
		switch {
		case strings.HasPrefix(p.expected, "cast"):
			rep.Cast++
		case strings.HasPrefix(p.expected, "dequantized"):
			rep.Dequantized++
		default:
			rep.Exact++
		}
		if c != nil {
			cs = append(cs, c)
			pairs = append(pairs, p)
			rep.Bytes += d.t.NBytes()
		} else {
			rep.Equal++ // nothing to read: no elements
		}
	}
	for _, e := range unpaired {
		if k := aliasOf(e, ets, func(t *statedict.Tensor) bool { return paired[t] }); k != "" {
			rep.Tied = append(rep.Tied, e.Name+" → "+k)
			continue
		}
		if slices.ContainsFunc(ex.droppable, func(d string) bool { return e.Name == d || strings.HasPrefix(e.Name, d+".") }) {
			rep.Dropped = append(rep.Dropped, e.Name)
			continue
		}
		p := ParityProblem{Tensor: e.Name, Kind: "missing"}
		if o := originOf(e.Tensor); o != nil && o.name != e.Name {
			p.Source = o.name
		}
		rep.Problems = append(rep.Problems, p)
	}
	var dused []statedict.NamedTensor
	for _, n := range order {
		if x := byName[n]; x.used && x.group == nil {
			dused = append(dused, statedict.NamedTensor{Name: n, Tensor: x.t})
		}
	}
	for _, n := range order {
		x := byName[n]
		if x.used {
			continue
		}
		if x.group == nil {
			if k := aliasOf(statedict.NamedTensor{Name: n, Tensor: x.t}, dused, func(*statedict.Tensor) bool { return true }); k != "" {
				rep.Tied = append(rep.Tied, n+" → "+k)
				continue
			}
		}
		rep.Problems = append(rep.Problems, ParityProblem{Tensor: n, Kind: "extra"})
	}
	// A per-device output: every rank's copy of a replicated piece, beyond the first that
	// formats.Open reassembles, against the same expected values.
	final := map[string]*statedict.Tensor{}
	for _, p := range pairs {
		final[p.name] = p.final
	}
	reps, closeRanks, err := replicas(ctx, dst, func(name string) *statedict.Tensor { return final[name] })
	defer closeRanks()
	if err != nil {
		return nil, err
	}
	byPair := map[string]pairing{}
	for _, p := range pairs {
		byPair[p.name] = p
	}
	for _, r := range reps {
		p := byPair[r.name]
		p.piece, p.offsets, p.swapped = fmt.Sprintf("rank %d's copy of the piece at %v", r.rank, r.offsets), r.offsets, false
		p.shape = r.e.Shape
		if r.d.DTypeName() != r.e.DTypeName() || !slices.Equal(r.d.Shape, r.e.Shape) {
			rep.Problems = append(rep.Problems, ParityProblem{Tensor: p.name, Piece: p.piece, Kind: "shape",
				Want: fmt.Sprintf("%s %v", r.e.DTypeName(), r.e.Shape), Got: fmt.Sprintf("%s %v", r.d.DTypeName(), r.d.Shape)})
			continue
		}
		c, prob := p.comparison(r.e, r.d)
		switch {
		case prob != nil:
			rep.Problems = append(rep.Problems, *prob)
		case c != nil:
			cs, pairs = append(cs, c), append(pairs, p)
			rep.Replicas++
			rep.Bytes += r.d.NBytes()
		}
	}
	release := func() { sck.ReleaseMemory(); dck.ReleaseMemory() }
	if err := compareAll(ctx, cs, release); err != nil {
		return nil, fmt.Errorf("comparing %s with %s: %w", src, dst, err)
	}
	for i, c := range cs {
		if c.differ == 0 {
			if pairs[i].piece == "" {
				rep.Equal++
			}
			continue
		}
		pr := pairs[i].valueProblem(c)
		if pairs[i].piece == "" && pairs[i].d != nil {
			pr.Piece = holder(dck.Shards[pairs[i].d.t], pr.Index)
		}
		rep.Problems = append(rep.Problems, pr)
	}
	if treeFormats[dck.Format] {
		if err := compareValues(rep, ex.root, dck.Root); err != nil {
			return nil, err
		}
	} else {
		rep.NotCompared = countValues(ex.root)
	}
	if err := alongside(ctx, sck, dck, conv, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// alongside checks the training-state files an HF Trainer checkpoint folder's conversion
// took along into the output folder.
func alongside(ctx context.Context, sck, dck *statedict.Checkpoint, conv *Conversion, rep *ParityReport) error {
	if dck.Format != "hf" {
		if st, err := storage.Stat(ctx, dck.Path); err != nil || !st.IsDir() {
			return nil
		}
	}
	for _, f := range sck.Ignored {
		if !hf.IsTrainerState(f) {
			continue
		}
		d := storage.Join(dck.Path, f)
		if _, err := storage.Stat(ctx, d); err != nil {
			if dck.Format == "hf" && errors.Is(err, os.ErrNotExist) {
				rep.Problems = append(rep.Problems, ParityProblem{Tensor: f, Kind: "missing"})
			}
			continue
		}
		sub, err := parity(ctx, storage.Join(sck.Path, f), d, conv.alongside())
		if err != nil {
			return err
		}
		rep.Alongside = append(rep.Alongside, sub)
	}
	return nil
}

// logicalGroups replaces the members of dplan's groups in the destination's name table by
// each group's logical tensor, returning the new name order.
func logicalGroups(dplan *quant.Plan, byName map[string]*dstTensor, order []string) []string {
	members := map[string]bool{}
	for _, g := range dplan.Groups {
		for _, m := range g.Members() {
			members[m] = true
			delete(byName, m)
		}
	}
	for _, a := range dplan.Aux {
		members[a] = true
		delete(byName, a)
	}
	out := slices.DeleteFunc(order, func(n string) bool { return members[n] })
	for _, g := range dplan.Groups {
		byName[g.Name] = &dstTensor{group: g, t: &statedict.Tensor{DType: g.CodeDType(), Shape: g.Shape}}
		out = append(out, g.Name)
	}
	return out
}

// canonical is a name without DDP's and torch.compile's wrapper components, for pairing
// names when the conversion's rules are not known exactly.
func canonical(name string) string {
	parts := strings.Split(name, ".")
	parts = slices.DeleteFunc(parts, func(p string) bool { return p == "module" || p == "_orig_mod" })
	return strings.Join(parts, ".")
}

// aliasOf returns the name of another tensor of ts that is the same view of the same
// storage as t and satisfies ok; "" if none.
func aliasOf(t statedict.NamedTensor, ts []statedict.NamedTensor, ok func(*statedict.Tensor) bool) string {
	for _, o := range ts {
		if o.Name != t.Name && sameView(o.Tensor, t.Tensor) && ok(o.Tensor) {
			return o.Name
		}
	}
	return ""
}

// sameView reports whether a and b view the same elements of one storage.
func sameView(a, b *statedict.Tensor) bool {
	return a.Storage != nil && a.Storage == b.Storage && a.DType == b.DType && a.Offset == b.Offset &&
		slices.Equal(a.Shape, b.Shape) && slices.Equal(a.Strides, b.Strides) && a.Conj == b.Conj && a.Neg == b.Neg
}
