package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/storage"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// choice is the set of values a flag takes, with aliases, for parsing with a suggestion
// of the nearest value and for shell completion.
type choice struct {
	flag    string
	values  []string          // canonical values, in the order help lists them
	aliases map[string]string // alias → canonical value
}

// dtypeChoice is --dtype and --optimizer-dtype: torch's names and the usual short ones.
func dtypeChoice(flag string) choice {
	return choice{flag, []string{"keep", "bfloat16", "float16", "float32"},
		map[string]string{"bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16", "fp32": "float32", "float": "float32", "f32": "float32"}}
}

var (
	formatChoice     = choice{"format", []string{"torch", "safetensors", "dcp"}, map[string]string{"pt": "torch", "st": "safetensors"}}
	targetChoice     = choice{"to", []string{"tpu", "cpu"}, nil}
	dequantizeChoice = choice{"dequantize", []string{"all", "auto"}, map[string]string{"none": ""}}
	tpuGenChoice     = choice{"tpu-gen", []string{"v4", "v5e", "v5p", "v6e", "tpu7x"}, map[string]string{"v5litepod": "v5e", "trillium": "v6e", "v7x": "tpu7x", "ironwood": "tpu7x"}}
	progressChoice   = choice{"progress", []string{"auto", "always", "never"}, nil}
	compressChoice   = choice{"compress", []string{"zstd"}, map[string]string{"zstandard": "zstd"}}
)

// parse returns the canonical value of s, or a usage error naming the values and the
// nearest one.
func (c choice) parse(s string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for _, v := range c.values {
		if l == v {
			return v, nil
		}
	}
	if v, ok := c.aliases[l]; ok {
		return v, nil
	}
	msg := fmt.Sprintf("--%s %q: one of %s", c.flag, s, orList(c.values))
	if len(c.values) == 1 {
		msg = fmt.Sprintf("--%s %q: %s is the one value", c.flag, s, c.values[0])
	}
	var cands []string
	cands = append(cands, c.values...)
	for a, v := range c.aliases {
		if v != "" {
			cands = append(cands, a)
		}
	}
	if near := nearest(l, cands); near != "" {
		if v, ok := c.aliases[near]; ok {
			near = v
		}
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	return "", usage(fmt.Errorf("%s", msg))
}

// orList says values as a choice: "a", "a or b", "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// complete offers the flag's values to shell completion.
func (c choice) complete(cmd *cobra.Command) {
	cmd.RegisterFlagCompletionFunc(c.flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return c.values, cobra.ShellCompDirectiveNoFileComp
	})
}

// completeTopology offers --topology the accelerator types of every generation, slices of
// 1 to 512 (chips or cores, as the type counts them) in powers of two that runtime accepts.
func completeTopology(cmd *cobra.Command) {
	cmd.RegisterFlagCompletionFunc("topology", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var types []string
		for _, g := range runtime.Generations() {
			for n := 1; n <= 512; n *= 2 {
				if t, err := runtime.ParseTopology(fmt.Sprintf("%s-%d", g.AcceleratorPrefix, n)); err == nil {
					types = append(types, t.AcceleratorType())
				}
			}
		}
		return types, cobra.ShellCompDirectiveNoFileComp
	})
}

// nearest is the candidate within edit distance 2 of s (the closest, first on ties), or "".
func nearest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// sourcePath resolves a checkpoint argument: a local path that exists is itself (it wins
// over a repository id of the same spelling), a gs:// or s3:// URL is read from its
// bucket, and ORG/NAME[@REVISION] is the snapshot of that Hugging Face repository in the
// local hub cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub) — never
// downloaded; when it is not there the error says how to get it.
func sourcePath(p string) (string, error) {
	if storage.IsRemote(p) {
		return p, nil
	}
	if _, err := os.Lstat(p); err == nil {
		return p, nil
	}
	id, ok := hf.ParseRepoID(p) // never ./x or ../x: an id starts with a letter or digit
	if !ok {
		return p, nil
	}
	return hf.Snapshot(hf.CacheDir(), id)
}

// recordedArgs is the command line as a manifest records it: the program, the command,
// every flag given as --name=value with choice values in their canonical spelling (bf16 →
// bfloat16, trillium → v6e), then the arguments — so that a reader of the manifest (ckpt
// verify) gets back exactly the conversion that ran, whatever aliases were typed.
func recordedArgs(cmd *cobra.Command, args []string, choices ...choice) []string {
	byFlag := map[string]choice{}
	for _, c := range choices {
		byFlag[c.flag] = c
	}
	out := append([]string{os.Args[0]}, strings.Fields(cmd.CommandPath())[1:]...)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		for _, v := range vals {
			if c, ok := byFlag[f.Name]; ok {
				if cv, err := c.parse(v); err == nil {
					v = cv
				}
			}
			out = append(out, "--"+f.Name+"="+v)
		}
	})
	return append(out, args...)
}
