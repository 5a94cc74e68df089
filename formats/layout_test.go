package formats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestChooseLayout: the destination rules for every kind of source, destination and layout
// asked for, per rank too (the CLI's end-to-end cases are cmd/ckpt's TestDestinationRules).
func TestChooseLayout(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	os.Mkdir(existing, 0o755)
	folderPT := filepath.Join(dir, "folder.pt")
	os.Mkdir(folderPT, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(existing, link)
	hf := "../testdata/hf/mistral_sharded"
	dcp := "../testdata/dcp/model"
	file := "../testdata/torch/training_cuda.pt"
	st := "../testdata/safetensors/every_dtype.safetensors"
	for _, c := range []struct {
		src, dst string
		want     Layout
		perRank  bool
		out      string
		lay      Layout
		err      bool
	}{
		{hf, "out", "", false, "out", HFFolder, false},
		{hf, "out/", "", false, "out", HFFolder, false},
		{dcp, "out", "", false, "out", DCPFolder, false},
		{hf, "m.pt", "", false, "m.pt", TorchFile, false},
		{hf, existing, TorchFile, false, filepath.Join(existing, "mistral_sharded.pt"), TorchFile, false},
		{file, existing, "", false, filepath.Join(existing, "training_cuda.pt"), TorchFile, false},
		{st, existing, "", false, filepath.Join(existing, "every_dtype.safetensors"), SafetensorsFile, false},
		{file, "x.safetensors", "", false, "x.safetensors", SafetensorsFile, false},
		{file, "out/", SafetensorsFile, false, "out", HFFolder, false},
		{file, "x", "", false, "x", TorchFile, false},
		{file, "x", DCPFolder, false, "x", DCPFolder, false},
		// A file name stays a file where a folder is (the conversion then refuses it), and a
		// link to a folder is no folder to write into.
		{file, folderPT, "", false, folderPT, TorchFile, false},
		{file, link, "", false, link, TorchFile, false},
		// Per rank: a folder, dcp by default, safetensors one file per rank.
		{file, "out/", "", true, "out", DCPFolder, false},
		{file, "out", SafetensorsFile, true, "out", SafetensorsRanks, false},
		{file, "x.safetensors", SafetensorsFile, true, "", "", true},
		{file, "x.pt", TorchFile, true, "", "", true},
		{file, "x", "gguf", false, "", "", true},
	} {
		out, lay, err := ChooseLayout(context.Background(), c.src, c.dst, c.want, c.perRank)
		if c.err {
			if !errors.Is(err, ErrLayout) {
				t.Errorf("%s → %s (%q, per rank %v): %v, want an ErrLayout", c.src, c.dst, c.want, c.perRank, err)
			}
			continue
		}
		if err != nil || out != c.out || lay != c.lay {
			t.Errorf("%s → %s (%q, per rank %v): %s %s %v, want %s %s", c.src, c.dst, c.want, c.perRank, out, lay, err, c.out, c.lay)
		}
	}
}

// TestLayoutCapabilities: what each layout holds, from the one table.
func TestLayoutCapabilities(t *testing.T) {
	for _, c := range []struct {
		l                     Layout
		folder, tree, perRank bool
		format, ext           string
	}{
		{TorchFile, false, true, false, "torch", ".pt"},
		{SafetensorsFile, false, false, false, "safetensors", ".safetensors"},
		{HFFolder, true, false, false, "safetensors", ""},
		{DCPFolder, true, true, true, "dcp", ""},
		{SafetensorsRanks, true, false, true, "safetensors", ""},
	} {
		if !c.l.Valid() || c.l.Folder() != c.folder || c.l.Tree() != c.tree || c.l.PerRank() != c.perRank || c.l.Format() != c.format || c.l.Ext() != c.ext || c.l.Writer() == nil {
			t.Errorf("%s: folder %v tree %v per rank %v format %q ext %q", c.l, c.l.Folder(), c.l.Tree(), c.l.PerRank(), c.l.Format(), c.l.Ext())
		}
	}
	if Layout("gguf").Valid() {
		t.Error("an unknown layout is valid")
	}
}
