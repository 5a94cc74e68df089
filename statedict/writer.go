package statedict

import (
	"fmt"
	"hash"
	"io"
)

// Output is where a format writer puts the files of one checkpoint output. Writers create
// every file through it and never touch the file system themselves, so the caller decides
// where the bytes land and when the output counts as complete (ckpt's convert writes into a
// temporary folder renamed into place at the end, feeds progress, honours cancellation and
// releases the source's pages as bytes stream through).
type Output interface {
	// Create starts the file name of the output, a slash-separated path relative to the
	// output folder; a single-file output takes "" for its one file. The writer passes
	// file ranges on (RangeWriter), so tensor bytes need not be copied on the way.
	Create(name string) (io.WriteCloser, error)
	// Name is the output's final path: some layouts depend on it (torch.save names the
	// folder inside its zip after the file).
	Name() string
}

// WriteOptions are what every format writer takes besides the checkpoint. A writer uses
// the fields that apply to its layout and ignores the others.
type WriteOptions struct {
	// Sum, if set, returns a hash to be fed the bytes of key as they are written: a *Tensor
	// (its contiguous little-endian bytes) or, for writers that store whole storages, a
	// *Storage. The manifest's checksums come from it, so nothing is read twice.
	Sum func(key any) hash.Hash
	// MaxShardSize splits a sharded folder layout's weights into files of at most this many
	// bytes (a larger tensor gets a file of its own); 0 means the layout's default.
	MaxShardSize int64
	// Rewrite replaces the content of the checkpoint's extra files (Checkpoint.Extras) in a
	// folder output; a nil content leaves the file out.
	Rewrite map[string][]byte
	// Metadata is free-form string metadata for layouts that hold some (safetensors'
	// __metadata__).
	Metadata map[string]string
	// Sharding, for the per-rank layouts, splits the tensors across the ranks of a
	// distributed job: each rank's file holds that rank's pieces. Other layouts refuse it.
	Sharding *Sharding
	// Ranks, with Sharding, lists the ranks whose files this call writes — one host's
	// devices in a multi-host conversion; nil writes every rank's. A writer given some
	// ranks writes their files only, no index, and returns what it wrote as Written.Part;
	// the layout's Finisher writes the index from every part.
	Ranks []int
	// WeightsOnly makes a Python object outside torch's weights_only allowlist an error
	// instead of a value pickled as the source had it (Written.Kept), so that every pickle
	// written loads with torch.load(weights_only=True).
	WeightsOnly bool
	// Compress names a compression for layouts that have one: "zstd" stores every item of a
	// DCP folder with torch's ZStandard stream extension. "" writes uncompressed.
	Compress string
}

// Written reports what a format writer wrote.
type Written struct {
	// Files are the output's files, relative to the output folder (a single-file output
	// lists its own base name).
	Files []string
	// Bytes is the total size of the files holding tensors.
	Bytes int64
	// Names gives the name each written tensor has in the output when the layout renames
	// or de-duplicates (flat layouts keep one name per tied tensor); nil means every tensor
	// of the tree was written under its flattened name.
	Names map[*Tensor]string
	// Tied maps each name left out as an alias of a tensor written under another name.
	Tied map[string]string
	// NotWritten lists the values the layout cannot hold, by flattened name with their
	// Python type ("optimizer.param_groups.0.lr: float").
	NotWritten []string
	// Part is what a writer of some ranks (WriteOptions.Ranks) records for the layout's
	// index — where each of its items lies in its files — as JSON, for the Finisher.
	Part []byte
	// Kept lists the Python objects written as the source pickled them although
	// torch.load(weights_only=True) refuses them, by flattened name with their class
	// ("hyper_parameters_type: omegaconf.dictconfig.DictConfig").
	Kept []string
}

// Writer writes ck in one on-disk layout through out. Every format package provides one
// (formats.Writers lists them), so converting chooses a writer from a table.
type Writer func(out Output, ck *Checkpoint, opts WriteOptions) (*Written, error)

// Finisher completes a per-rank output written in parts: given the Written.Part of every
// call that wrote some of the ranks (the hosts of a multi-host conversion, in any order,
// together covering every rank once), and the same ck and options, it writes the layout's
// index through out (DCP's .metadata) and reports the whole output's files. It reads no
// tensor bytes.
type Finisher func(out Output, ck *Checkpoint, opts WriteOptions, parts [][]byte) (*Written, error)

// CopyFiles copies ck's extra files (config.json, tokenizer files, …: Checkpoint.Extras)
// into a folder output, read through ck.Files (confined to the source folder), replacing
// the content of those rewrite names (a nil content leaves the file out). It returns the
// names written. Folder layouts call it so the files that travel with the weights do.
func CopyFiles(out Output, ck *Checkpoint, rewrite map[string][]byte) ([]string, error) {
	var names []string
	for _, name := range ck.Extras {
		content, rewritten := rewrite[name]
		if rewritten && content == nil {
			continue
		}
		w, err := out.Create(name)
		if err != nil {
			return nil, err
		}
		if rewritten {
			_, err = w.Write(content)
		} else {
			err = copyFile(w, ck, name)
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

func copyFile(w io.Writer, ck *Checkpoint, name string) error {
	if ck.Files == nil {
		return fmt.Errorf("%s: the checkpoint has no folder to read %s from", ck.Path, name)
	}
	in, err := ck.Files.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if st.Size() > MaxExtraFile {
		return fmt.Errorf("%d bytes, more than the %d a file carried beside the weights (a config, a tokenizer) may have", st.Size(), int64(MaxExtraFile))
	}
	_, err = io.Copy(w, io.LimitReader(in, MaxExtraFile+1))
	return err
}

// MaxExtraFile bounds a file carried into a folder output beside the weights
// (Checkpoint.Extras: configs, tokenizer files, trainer_state.json).
const MaxExtraFile = 1 << 30
