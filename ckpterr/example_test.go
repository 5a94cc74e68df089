package ckpterr_test

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// A caller sorts a failure with errors.Is, and finds where it happened with errors.As,
// whichever reader returned it.
func Example() {
	// What a reader returns for a safetensors file whose second tensor overlaps the first,
	// wrapped once more by the caller's own context.
	err := fmt.Errorf("loading the model: %w", &ckpterr.FormatError{
		Format: "safetensors",
		File:   "model.safetensors",
		Item:   "b",
		Offset: 62,
		Err:    errors.New("data_offsets [4, 8] overlap the previous tensor, which ends at 8"),
	})

	switch {
	case errors.Is(err, ckpterr.ErrDangerous):
		fmt.Println("refusing: the file would run code")
	case errors.Is(err, ckpterr.ErrUnsupported):
		fmt.Println("valid, but not something ckpt reads")
	case errors.Is(err, ckpterr.ErrCorrupt):
		fmt.Println("the file is broken")
	}
	var fe *ckpterr.FormatError
	if errors.As(err, &fe) {
		fmt.Printf("%s, tensor %q, byte %d\n", fe.File, fe.Item, fe.Offset)
	}
	fmt.Println(err)
	// Output:
	// the file is broken
	// model.safetensors, tensor "b", byte 62
	// loading the model: model.safetensors: safetensors: "b": byte 62: data_offsets [4, 8] overlap the previous tensor, which ends at 8
}
