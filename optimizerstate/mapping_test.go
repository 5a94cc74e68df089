package optimizerstate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

func TestMap(t *testing.T) {
	emb := tensor(8, 4)
	head := *emb // a tied weight: same storage, same view
	withNames := optim([][]statedict.Value{ids(0, 1)}, shapes(s(3), s(4, 4)))
	g, _ := withNames.Get("param_groups")
	g.(*statedict.List).Items[0].(*statedict.Dict).Set("param_names", list("b", "a"))
	digits := optim([][]statedict.Value{ids(0, 1)}, nil)
	digits.Set("state", dict("0", adamState(4, 4), "1", adamState(3)))
	factored := dict("state", dict(
		int64(0), dict("step", int64(3), "exp_avg_sq_row", tensor(6), "exp_avg_sq_col", tensor(4), "RMS", tensor()),
		int64(1), dict("step", int64(3), "exp_avg_sq", tensor(4), "RMS", tensor())),
		"param_groups", list(dict("scale_parameter", true, "relative_step", true, "warmup_init", false, "params", list(ids(0, 1)...))))
	badFactored := dict("state", dict(int64(0), dict("exp_avg_sq_row", tensor(4), "exp_avg_sq_col", tensor(4))),
		"param_groups", list(dict("scale_parameter", true, "relative_step", true, "warmup_init", false, "params", list(ids(0, 1)...))))
	layers := dict("l0.w", tensor(4, 4), "l1.w", tensor(4, 4), "l2.w", tensor(4, 4), "l3.w", tensor(4, 4))
	byLayer := optim([][]statedict.Value{ids(0, 1), ids(2, 3)}, shapes(s(4, 4), s(4, 4), s(4, 4), s(4, 4)))

	cases := []struct {
		name  string
		model *statedict.Dict
		optim *statedict.Dict
		names []string
		// want are the mapped names and how; or wantErr, a substring of the error, with
		// the parameter index and model name it must report.
		want      []string
		by        string
		wantErr   string
		errIndex  int
		errName   string
		ambiguous []string
	}{
		{name: "one group in order",
			model: dict("a", tensor(4, 2), "b", tensor(4), "c", tensor(3, 4)),
			optim: optim([][]statedict.Value{ids(0, 1, 2)}, shapes(s(4, 2), s(4), s(3, 4))),
			want:  []string{"a", "b", "c"}, by: optimizerstate.ByOrder},
		{name: "decay and no-decay groups interleave uniquely",
			model: dict("fc1.w", tensor(16, 8), "fc1.b", tensor(16), "ln.w", tensor(16), "fc2.w", tensor(4, 16), "fc2.b", tensor(4)),
			optim: optim([][]statedict.Value{ids(0, 1), ids(2, 3, 4)}, shapes(s(16, 8), s(4, 16), s(16), s(16), s(4))),
			want:  []string{"fc1.w", "fc2.w", "fc1.b", "ln.w", "fc2.b"}, by: optimizerstate.ByShapes},
		{name: "groups by layer with equal shapes are ambiguous",
			model: layers, optim: byLayer,
			wantErr: "could be", errIndex: 1, ambiguous: []string{"l1.w", "l2.w"}},
		{name: "a names file settles it",
			model: layers, optim: byLayer, names: []string{"l0.w", "l2.w", "l1.w", "l3.w"},
			want: []string{"l0.w", "l2.w", "l1.w", "l3.w"}, by: optimizerstate.ByNamesFile},
		{name: "a names file naming a buffer",
			model: dict("w", tensor(4, 4), "bn.running_mean", tensor(4)),
			optim: optim([][]statedict.Value{ids(0)}, shapes(s(4))), names: []string{"bn.running_mean"},
			wantErr: "not a parameter", errIndex: 0, errName: "bn.running_mean"},
		{name: "a names file of the wrong length",
			model: layers, optim: byLayer, names: []string{"l0.w"},
			wantErr: "lists 1 names, the optimizer has 4", errIndex: -1},
		{name: "shape mismatch names the parameter",
			model:   dict("a", tensor(4, 2), "b", tensor(4)),
			optim:   optim([][]statedict.Value{ids(0, 1)}, shapes(s(4, 2), s(5))),
			wantErr: "exp_avg has shape [5], the parameter [4]", errIndex: 1, errName: "b"},
		{name: "more ids than parameters",
			model:   dict("a", tensor(4)),
			optim:   optim([][]statedict.Value{ids(0, 1)}, shapes(s(4), s(4))),
			wantErr: "no model parameter is left for it (the optimizer lists 2 parameters; the model state dict has 1", errIndex: 1},
		{name: "frozen parameter skipped",
			model: dict("emb", tensor(10, 4), "a", tensor(4, 4), "b", tensor(4)),
			optim: optim([][]statedict.Value{ids(0, 1)}, shapes(s(4, 4), s(4))),
			want:  []string{"a", "b"}, by: optimizerstate.ByShapes},
		{name: "frozen parameter among equal shapes is ambiguous",
			model:   dict("a", tensor(4), "b", tensor(4), "c", tensor(4)),
			optim:   optim([][]statedict.Value{ids(0, 1)}, shapes(s(4), s(4))),
			wantErr: "could be", errIndex: 1, ambiguous: []string{"b", "c"}},
		{name: "tied weights count once, under the first name",
			model: dict("emb", emb, "w", tensor(4, 4), "head", &head),
			optim: optim([][]statedict.Value{ids(0, 1)}, shapes(s(8, 4), s(4, 4))),
			want:  []string{"emb", "w"}, by: optimizerstate.ByOrder},
		{name: "buffers and integer tensors are skipped",
			model: dict("w", tensor(4, 4), "bn.running_mean", tensor(4), "bn.running_var", tensor(4),
				"bn.num_batches_tracked", &statedict.Tensor{DType: statedict.Int64, Shape: []int64{}, Strides: []int64{}}, "rot.inv_freq", tensor(2), "b", tensor(4)),
			optim: optim([][]statedict.Value{ids(0, 1)}, shapes(s(4, 4), s(4))),
			want:  []string{"w", "b"}, by: optimizerstate.ByOrder},
		{name: "parameters without state fit anything",
			model: dict("a", tensor(4), "b", tensor(3)),
			optim: optim([][]statedict.Value{ids(0, 1)}, nil),
			want:  []string{"a", "b"}, by: optimizerstate.ByOrder},
		{name: "param_names saved with the groups",
			model: dict("a", tensor(4, 4), "b", tensor(3)),
			optim: withNames,
			want:  []string{"b", "a"}, by: optimizerstate.ByParamNames},
		{name: "DCP FQN form",
			model: dict("a", tensor(4, 4), "b", tensor(3)),
			optim: optim([][]statedict.Value{fqns("b"), fqns("a")}, map[string][]int64{"a": s(4, 4), "b": s(3)}),
			want:  []string{"b", "a"}, by: optimizerstate.ByFQN},
		{name: "FQN without wrapper prefixes",
			model: dict("module.fc.weight", tensor(4, 4)),
			optim: optim([][]statedict.Value{fqns("fc.weight")}, map[string][]int64{"fc.weight": s(4, 4)}),
			want:  []string{"module.fc.weight"}, by: optimizerstate.ByFQN},
		{name: "FQN the model does not have",
			model:   dict("a", tensor(4, 4)),
			optim:   optim([][]statedict.Value{fqns("a", "zzz")}, nil),
			wantErr: "no such entry", errIndex: 1, errName: "zzz"},
		{name: "digit-string ids after a DCP round trip",
			model: dict("a", tensor(4, 4), "b", tensor(3)),
			optim: digits,
			want:  []string{"a", "b"}, by: optimizerstate.ByOrder},
		{name: "transformers Adafactor factored moments",
			model: dict("w", tensor(6, 4), "b", tensor(4)),
			optim: factored,
			want:  []string{"w", "b"}, by: optimizerstate.ByOrder},
		{name: "factored moments of the wrong shape",
			model:   dict("w", tensor(6, 4), "b", tensor(4)),
			optim:   badFactored,
			wantErr: "exp_avg_sq_row has shape [4], a parameter of shape [6 4] needs [6]", errIndex: 0, errName: "w"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := optimizerstate.Parse(c.optim)
			if err != nil {
				t.Fatal(err)
			}
			m, err := optimizerstate.Map(o, c.model, c.names)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				var mm *optimizerstate.MismatchError
				var amb *optimizerstate.AmbiguousError
				switch {
				case errors.As(err, &mm):
					if mm.Index != c.errIndex || mm.Name != c.errName {
						t.Errorf("mismatch at %d (%q), want %d (%q)", mm.Index, mm.Name, c.errIndex, c.errName)
					}
				case errors.As(err, &amb):
					if amb.Index != c.errIndex || !slices.Equal(amb.Names, c.ambiguous) {
						t.Errorf("ambiguous at %d among %q, want %d among %q", amb.Index, amb.Names, c.errIndex, c.ambiguous)
					}
				case c.errIndex >= 0:
					t.Errorf("error %T, want a mismatch or ambiguity", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range m.Params {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, c.want) || m.By != c.by {
				t.Errorf("mapped %q by %s, want %q by %s", got, m.By, c.want, c.by)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name string
		d    *statedict.Dict
		want string
	}{
		{"not an optimizer", dict("state", dict()), "not an optimizer state dict"},
		{"group without params", dict("state", dict(), "param_groups", list(dict("lr", 0.1))), "no params list"},
		{"id listed twice", optim([][]statedict.Value{ids(0, 1), ids(1)}, nil), "listed twice"},
		{"ids mixing positions and names", optim([][]statedict.Value{{int64(0), "a"}}, nil), "mix positions and names"},
		{"state key that is no id", dict("state", dict("x", dict()), "param_groups", list(dict("params", list(int64(0))))), "not a parameter id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := optimizerstate.Parse(c.d)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			// A malformed optimizer state is the input's fault; a dict that is none is not.
			if corrupt := c.name != "not an optimizer"; errors.Is(err, ckpterr.ErrCorrupt) != corrupt {
				t.Errorf("error %v: corrupt %v, want %v", err, !corrupt, corrupt)
			}
		})
	}
}

// TestFixtures maps the optimizer states torch wrote in testdata/optim and
// testdata/torch: every kind is recognized and every parameter mapped, by the expected
// means.
func TestFixtures(t *testing.T) {
	cases := []struct {
		file, path, kind, by string
		params               int
		// spot checks: id → model name
		names map[int]string
	}{
		{"llama_cuda.pt", "optimizer", "AdamW", optimizerstate.ByTrainerGrouping, 20,
			map[int]string{0: "model.embed_tokens.weight", 14: "model.layers.1.mlp.down_proj.weight", 15: "model.layers.0.input_layernorm.weight", 19: "model.norm.weight"}},
		{"mlp_cuda.pt", "optimizer", "SGD", optimizerstate.ByOrder, 6, map[int]string{2: "bn.weight", 4: "fc2.weight"}},
		{"dcp", "optim", "AdamW", optimizerstate.ByFQN, 6, map[int]string{1: "fc2.weight", 2: "fc1.bias"}},
		{"../torch/training_cuda.pt", "optimizer", "AdamW", optimizerstate.ByTrainerGrouping, 6, map[int]string{1: "fc2.weight", 2: "fc1.bias"}},
		{"optimizers.pt", "sgd.optimizer", "SGD", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "sgd_plain.optimizer", "SGD", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adam_amsgrad.optimizer", "Adam", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adamw_groups.optimizer", "AdamW", optimizerstate.ByShapes, 6, map[int]string{1: "fc2.weight", 3: "bn.weight"}},
		{"optimizers.pt", "adagrad.optimizer", "Adagrad", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "rmsprop.optimizer", "RMSprop", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adafactor_hf.optimizer", "Adafactor (transformers)", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adafactor_torch.optimizer", "Adafactor", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "nadam.optimizer", "NAdam", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "rprop.optimizer", "Rprop", optimizerstate.ByShapes, 6, map[int]string{5: "fc2.bias"}},
		{"optimizers.pt", "asgd.optimizer", "ASGD", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adadelta.optimizer", "Adadelta", optimizerstate.ByOrder, 6, nil},
		{"optimizers.pt", "adamax.optimizer", "Adamax", optimizerstate.ByOrder, 6, nil},
	}
	found := map[string][]*optimizerstate.Found{}
	for _, c := range cases {
		t.Run(c.file+"/"+c.path, func(t *testing.T) {
			if found[c.file] == nil {
				fs, err := optimizerstate.Find(open(t, c.file).Root, nil)
				if err != nil {
					t.Fatal(err)
				}
				found[c.file] = fs
			}
			i := slices.IndexFunc(found[c.file], func(f *optimizerstate.Found) bool { return f.Path == c.path })
			if i < 0 {
				t.Fatalf("no optimizer at %s", c.path)
			}
			f := found[c.file][i]
			if f.Err != nil {
				t.Fatal(f.Err)
			}
			if f.Optimizer.Kind != c.kind || f.Mapping.By != c.by || len(f.Mapping.Params) != c.params {
				t.Errorf("%s, %d parameters mapped by %s; want %s, %d by %s", f.Optimizer.Kind, len(f.Mapping.Params), f.Mapping.By, c.kind, c.params, c.by)
			}
			for id, name := range c.names {
				if got := f.Mapping.Params[id].Name; got != name {
					t.Errorf("parameter %d is %s, want %s", id, got, name)
				}
			}
		})
	}
}

// TestMismatchReported puts real optimizer states next to models they do not belong
// to: the report names the first parameter at fault and the model entry.
func TestMismatchReported(t *testing.T) {
	llama := open(t, "llama_cuda.pt").Root.(*statedict.Dict)
	mlp := open(t, "mlp_cuda.pt").Root.(*statedict.Dict)
	llamaModel := get(t, llama, "model").(*statedict.Dict)
	short := statedict.NewDict(llamaModel.Class)
	for _, e := range llamaModel.Entries() {
		if e.Key != "model.layers.1.self_attn.k_proj.weight" {
			short.Set(e.Key, e.Value)
		}
	}
	cases := []struct {
		name          string
		model, optim  statedict.Value
		index         int
		model0, inErr string
	}{
		{"other model", get(t, mlp, "model"), get(t, llama, "optimizer"), 0, "fc1.weight", "exp_avg has shape [64 16], the parameter [16 8] (group 0 lists 15; the model has 3 parameters the Trainer decays)"},
		// Shapes cannot tell k_proj from v_proj: v_proj takes id 9, and id 10 is the first
		// that fits nowhere.
		{"one parameter missing", short, get(t, llama, "optimizer"), 10, "model.layers.1.self_attn.o_proj.weight",
			"exp_avg has shape [8 16], the parameter [16 16] (group 0 lists 15; the model has 14 parameters the Trainer decays)"},
		{"extra optimizer parameter", get(t, mlp, "model"), get(t, mlp, "optimizer"), -1, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, err := optimizerstate.Find(dict("model", c.model, "optimizer", c.optim), nil)
			if err != nil || len(fs) != 1 {
				t.Fatalf("%d optimizers found, %v", len(fs), err)
			}
			var mm *optimizerstate.MismatchError
			if c.index < 0 {
				if fs[0].Err != nil {
					t.Fatalf("a matching pair reported %v", fs[0].Err)
				}
				return
			}
			if !errors.As(fs[0].Err, &mm) {
				t.Fatalf("error %v, want a mismatch", fs[0].Err)
			}
			if mm.Index != c.index || mm.Name != c.model0 || !strings.Contains(mm.Error(), c.inErr) {
				t.Errorf("reported %q (index %d, name %q), want index %d, name %q, %q", mm, mm.Index, mm.Name, c.index, c.model0, c.inErr)
			}
		})
	}
}

// TestFindKeepsFittingModel: a sibling model the optimizer does not fit, met after the one it
// fits, must not replace it (found converting a DCP checkpoint with model, optim and other
// tensor dicts side by side: the state was attached to the wrong dict and then dropped).
func TestFindKeepsFittingModel(t *testing.T) {
	ck, err := formats.Open(context.Background(), "../testdata/dcp/sharded")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	found, err := optimizerstate.Find(ck.Root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Err != nil || found[0].ModelPath != "model" || len(found[0].Mapping.Params) != 7 {
		t.Fatalf("found %+v", found[0])
	}
}
