package diffusers

import (
	"path"
	"testing"
)

// FuzzComponents: any model_index.json gives component names that are single folder names
// of the pipeline, or an error; never a panic.
func FuzzComponents(f *testing.F) {
	f.Add([]byte(`{"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"], "safety_checker": [null, null]}`))
	f.Add([]byte(`{"../x": ["diffusers", "X"]}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := Components(b)
		if err != nil {
			return
		}
		for _, n := range names {
			if n == "" || n == "." || n == ".." || path.Base(n) != n {
				t.Fatalf("component %q leaves the pipeline", n)
			}
		}
	})
}

func TestComponentsOrder(t *testing.T) {
	names, err := Components([]byte(`{"_class_name": "P", "vae": ["diffusers", "A"], "feature_extractor": [null, null], "unet": ["diffusers", "U"], "requires_safety_checker": true}`))
	if err != nil || len(names) != 2 || names[0] != "vae" || names[1] != "unet" {
		t.Fatalf("%v %v", names, err)
	}
	if _, err := Components([]byte(`{"../etc": ["diffusers", "U"]}`)); err == nil {
		t.Fatal("a component outside the pipeline was accepted")
	}
}
