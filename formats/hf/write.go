package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/statedict"
)

// DefaultMaxShardSize is transformers' default max_shard_size (5 GB, decimal).
const DefaultMaxShardSize = 5_000_000_000

// Write is the statedict.Writer of Hugging Face folders: the tensors (flattened, tied
// aliases kept once, as safetensors.Flatten lays them out) in model.safetensors, or in
// shards model-0000i-of-0000n.safetensors of at most opts.MaxShardSize bytes listed by
// model.safetensors.index.json, split in state-dict order as huggingface_hub does — named
// after ck.WeightsName when the source folder used another name (diffusers'
// diffusion_pytorch_model, PEFT's adapter_model, which their loaders require); then the
// checkpoint's extra files (config.json, tokenizer files, …) read from ck.Files, with
// opts.Rewrite's replacements.
func Write(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	flat, err := safetensors.Flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	limit := opts.MaxShardSize
	if limit <= 0 {
		limit = DefaultMaxShardSize
	}
	// A tensor that does not fit starts a new shard; one larger than the limit gets a shard
	// of its own.
	var shards [][]statedict.NamedTensor
	var size int64
	for _, nt := range flat.Tensors {
		n := nt.Tensor.NBytes()
		if len(shards) == 0 || size+n > limit && len(shards[len(shards)-1]) > 0 {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], nt)
		size += n
	}
	if len(shards) == 0 {
		shards = append(shards, nil)
	}
	w := &statedict.Written{Names: flat.Names(), Tied: flat.Tied, NotWritten: flat.NotWritten}
	weightMap := map[string]string{}
	var total, params int64
	stem := ck.WeightsName
	if stem == "" {
		stem = "model"
	}
	for i, shard := range shards {
		name := stem + ".safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("%s-%05d-of-%05d.safetensors", stem, i+1, len(shards))
		}
		f, err := out.Create(name)
		if err != nil {
			return nil, err
		}
		n, err := safetensors.WriteFile(f, shard, flat.Metadata(shard, opts.Metadata), opts.Sum)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		w.Bytes += n
		w.Files = append(w.Files, name)
		for _, nt := range shard {
			weightMap[nt.Name] = name
			total += nt.Tensor.NBytes()
			params += nt.Tensor.NumEl()
		}
	}
	if len(shards) > 1 {
		idx := map[string]any{
			"metadata":   map[string]int64{"total_size": total, "total_parameters": params},
			"weight_map": weightMap,
		}
		b, err := json.MarshalIndent(idx, "", "  ")
		if err != nil {
			return nil, err
		}
		index := stem + ".safetensors.index.json"
		if err := writeFile(out, index, append(b, '\n')); err != nil {
			return nil, err
		}
		w.Files = append(w.Files, index)
	}
	extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
	if err != nil {
		return nil, err
	}
	w.Files = append(w.Files, extras...)
	return w, nil
}

func writeFile(out statedict.Output, name string, b []byte) error {
	f, err := out.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// trainingState are the names of the training-state files a checkpoint folder holds next
// to the model, torch.save files that resume training: a transformers Trainer's
// (checkpoint-N/: optimizer, LR scheduler, grad scaler, per-process RNG states) and
// accelerate's save_state (optimizer_N / scheduler_N / sampler_N .bin, the dataloader
// state, scaler.pt, per-process random_states_N.pkl; accelerate/checkpointing.py).
// training_args.bin is not among them: it pickles a TrainingArguments object, code ckpt
// does not run.
var trainingState = regexp.MustCompile(`^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state.*\.pth|(optimizer|scheduler|sampler)(_\d+)?\.bin|dl_state_dict\.bin|random_states_\d+\.pkl)$`)

// trainingStateFolder are the training-state folders of accelerate's save_state under
// FSDP's SHARDED_STATE_DICT: optimizer_N/, a DCP folder of {"optimizer": state by
// parameter name} (accelerate/utils/fsdp_utils.py save_fsdp_optimizer).
var trainingStateFolder = regexp.MustCompile(`^optimizer_\d+/$`)

// IsTrainerState reports whether a file of a checkpoint folder is training state (see
// trainingState).
func IsTrainerState(name string) bool { return trainingState.MatchString(name) }

// IsTrainingStateFolder reports whether name, a folder of a checkpoint folder listed with
// a trailing "/", is a training-state DCP folder (see trainingStateFolder).
func IsTrainingStateFolder(name string) bool { return trainingStateFolder.MatchString(name) }

// ConfigFile is a Hugging Face folder's model configuration.
const ConfigFile = "config.json"

// ConfigDType returns config (a config.json) naming dtype as the model's dtype:
// transformers loads a model in the dtype its config names (from_pretrained(dtype="auto")),
// so a bfloat16 checkpoint whose config still says float32 would be upcast back on load.
// It rewrites "dtype" (transformers 5) and "torch_dtype" (earlier versions) wherever they
// name a floating dtype, in the top-level config and its sub-configs (text_config, …), not
// inside quantization configs. It returns the old dtype, or "" and config unchanged when
// nothing needed rewriting.
func ConfigDType(config []byte, dtype statedict.DType) ([]byte, string, error) {
	var top map[string]any
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return nil, "", fmt.Errorf("%s: %w: %w", ConfigFile, ckpterr.ErrCorrupt, err)
	}
	old := ""
	var set func(m map[string]any)
	set = func(m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case string:
				if (k == "dtype" || k == "torch_dtype") && floatDTypeName(x) && x != dtype.String() {
					old, m[k] = x, dtype.String()
				}
			case map[string]any:
				if k != "quantization_config" && k != "compression_config" {
					set(x)
				}
			}
		}
	}
	set(top)
	if old == "" {
		return config, "", nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(top); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), old, nil
}

// floatDTypeName reports whether a config's dtype string names a floating torch dtype.
func floatDTypeName(s string) bool {
	switch s {
	case "float16", "bfloat16", "float32", "float64", "float", "half", "double":
		return true
	}
	return false
}

// MaxConfig bounds the model configuration read (ReadConfig): real ones are a few KiB.
const MaxConfig = 1 << 20

// ReadConfig reads the config.json of the checkpoint folder files (nil, nil when it has
// none), refusing one larger than MaxConfig rather than reading it whole.
func ReadConfig(files fs.FS) ([]byte, error) {
	if files == nil {
		return nil, nil
	}
	f, err := files.Open(ConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfig+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	if len(b) > MaxConfig {
		return nil, fmt.Errorf("%s: %w: more than %d bytes, more than a model configuration holds", ConfigFile, ckpterr.ErrCorrupt, MaxConfig)
	}
	return b, nil
}
