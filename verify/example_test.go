package verify_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// Parity after a bfloat16 conversion of a Hugging Face folder: every tensor paired, each
// bfloat16 value exactly torch's rounding of the float32 source.
func ExampleParity() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	src, dst := "../testdata/hf/mistral_sharded", filepath.Join(dir, "model.safetensors")
	opts := convert.DefaultOptions(src, dst)
	opts.Plan.DType = statedict.BFloat16
	opts.Args = []string{"ckpt", "convert", "--to", "tpu", "--dtype", "bfloat16", src, dst}
	if _, err := convert.Run(context.Background(), opts); err != nil {
		fmt.Println(err)
		return
	}
	rep, err := verify.Parity(context.Background(), src, dst, verify.ParityOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("conversion %s: %d pairs, %d equal (%d cast); parity %v\n", rep.Conversion, rep.Pairs, rep.Equal, rep.Cast, rep.OK())
	// Output: conversion --dtype bfloat16: 20 pairs, 20 equal (20 cast); parity true
}
