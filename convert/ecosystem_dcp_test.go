package convert_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/verify"
)

// dcpFixture is one folder of testdata/ecosystem/dcp.json.
type dcpFixture struct {
	Tensors orderedListing    `json:"tensors"`
	Bytes   map[string]string `json:"bytes"`
}

func dcpFixtures(t *testing.T) map[string]dcpFixture {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/dcp.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	out := map[string]dcpFixture{}
	for _, name := range []string{"megatron", "zstd"} {
		var f dcpFixture
		if err := json.Unmarshal(raw[name], &f); err != nil {
			t.Fatal(err)
		}
		out[name] = f
	}
	if len(out["megatron"].Bytes) != 4 || len(out["zstd"].Tensors.Names) == 0 {
		t.Fatal("fixtures incomplete")
	}
	return out
}

// TestEcosystemDCPInspect lists a Megatron-core DCP (bytes entries: Transformer Engine
// extra state as io.BytesIO) and a DCP written with torch's ZStandard extension exactly as
// torch lists them, reading compressed items without holding the checkpoint in memory.
func TestEcosystemDCPInspect(t *testing.T) {
	for name, want := range dcpFixtures(t) {
		ck, err := formats.Open(context.Background(), "../testdata/ecosystem/dcp/"+name)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
		ck.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, tn := range rep.Tensors {
			got = append(got, tn.Name)
			w := want.Tensors.Entries[tn.Name]
			if tn.DType != w.DType || fmt.Sprint(tn.Shape) != fmt.Sprint(w.Shape) || tn.SHA256 != w.SHA256 {
				t.Errorf("%s %s: %s %v %s, torch lists %+v", name, tn.Name, tn.DType, tn.Shape, tn.SHA256, w)
			}
		}
		if !reflect.DeepEqual(got, want.Tensors.Names) {
			t.Errorf("%s: tensors %v, torch lists %v", name, got, want.Tensors.Names)
		}
	}
}

// TestEcosystemDCPConvert: a Megatron-core DCP's bytes entries pass through DCP → DCP
// byte-identical; a torch file keeps them (warning that weights_only refuses io.BytesIO),
// a safetensors file says it cannot hold them. A ZStandard-compressed DCP converts to every
// format, and --compress zstd writes one torch's DCP loader reads. Every tensor loads in
// torch bit-identical.
func TestEcosystemDCPConvert(t *testing.T) {
	o := oracle.Require(t)
	fx := dcpFixtures(t)
	host, chroot := oracle.TempDir(t)
	type run struct {
		src, format, compress string
		sum                   *convert.Summary
	}
	var runs []run
	var jobs []ecosystemJob
	for _, src := range []string{"megatron", "zstd"} {
		for _, c := range []struct{ format, compress string }{{"dcp", ""}, {"dcp", "zstd"}, {"torch", ""}, {"safetensors", ""}} {
			dst := filepath.Join(host, src+"-"+c.format+c.compress)
			switch c.format {
			case "torch":
				dst += ".pt"
			case "safetensors":
				dst += ".safetensors"
			}
			sum, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/dcp/" + src, Dst: dst, Format: formats.Layout(c.format),
				Compress: c.compress, Plan: plan.Options{PlainData: true}})
			if err != nil {
				t.Fatalf("%s → %s %s: %v", src, c.format, c.compress, err)
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Errorf("%s → %s %s: check %+v %v", src, c.format, c.compress, rep, err)
			}
			runs = append(runs, run{src, c.format, c.compress, sum})
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: c.format, WeightsOnly: false})
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, r := range runs {
		t.Run(r.src+"/"+r.format+r.compress, func(t *testing.T) {
			if res[i].Error != "" {
				t.Fatal(res[i].Error)
			}
			want := fx[r.src]
			sameTensors(t, res[i].Tensors, want.Tensors, "")
			messages := strings.Join(r.sum.Messages(), "\n")
			switch {
			case r.src != "megatron":
			case r.format == "safetensors":
				if !strings.Contains(messages, "4 values not written") || !strings.Contains(r.sum.Warnings[0].Items[0], "_extra_state: _io.BytesIO") {
					t.Errorf("warnings %v", r.sum.Warnings)
				}
			default:
				if !reflect.DeepEqual(res[i].Bytes, want.Bytes) {
					t.Errorf("bytes entries %v, the source has %v", res[i].Bytes, want.Bytes)
				}
				kept := strings.Contains(messages, "_extra_state: _io.BytesIO") && strings.Contains(messages, "torch.load(weights_only=True) refuses them")
				if kept != (r.format == "torch") {
					t.Errorf("%s: warnings %v", r.format, r.sum.Warnings)
				}
			}
		})
	}
}

// TestBytesEntryErrorNamesIt: refusing a bytes entry (WeightsOnly, a torch file) names the
// entry and why, once — no doubled separators.
func TestBytesEntryErrorNamesIt(t *testing.T) {
	_, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/dcp/megatron", Dst: filepath.Join(t.TempDir(), "m.pt"),
		Format: formats.TorchFile, WeightsOnly: true, Plan: plan.Options{PlainData: true}})
	if err == nil || !strings.Contains(err.Error(), "decoder.layers.0.self_attention.linear_qkv._extra_state: _io.BytesIO cannot be loaded by torch.load(weights_only=True)") ||
		strings.Contains(err.Error(), ": :") {
		t.Errorf("got %v", err)
	}
}
