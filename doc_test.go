package ckpt_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/runtime"
)

// The entry points of the map: open a checkpoint, iterate its tensors, decode one, and
// read the slice it is planned for.
func Example() {
	ck, err := formats.Open(context.Background(), "testdata/torch/training_cuda.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	tensors, err := ck.Tensors()
	if err != nil {
		panic(err)
	}
	fmt.Println(ck.Format, len(tensors), "tensors")
	w, _ := ck.Tensor("model.fc2.bias")
	vals, err := codec.Float32s(w)
	if err != nil {
		panic(err)
	}
	fmt.Printf("model.fc2.bias %v[0] = %.4f\n", w.Shape, vals[0])
	t, err := runtime.ParseTopology("v5p-32")
	if err != nil {
		panic(err)
	}
	fmt.Println(t, t.Devices, "devices")
	// Output:
	// torch-zip 26 tensors
	// model.fc2.bias [4][0] = 0.0924
	// v5p-32 (2x2x4) 16 devices
}

// TestDocLinks: every link of the map names a package of the module and, after its last
// dot, an exported function, type, method, variable or constant in it — so a package moved or a function
// renamed shows here rather than as dead text in go doc.
func TestDocLinks(t *testing.T) {
	var links [][]string
	// The map, and the links that lead from a type to the package that decodes it (go doc
	// statedict.Tensor names codec.Float32s, which statedict cannot import).
	for file, want := range map[string]int{"doc.go": 15, "statedict/tensor.go": 1} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile(`\[github\.com/ckpt-dev/ckpt/([a-z/]+)(?:\.([A-Za-z0-9_.]+))?\]`).FindAllStringSubmatch(string(b), -1)
		if len(found) < want {
			t.Fatalf("%s: only %d links", file, len(found))
		}
		links = append(links, found...)
	}
	for _, l := range links {
		pkg, sym := l[1], l[2]
		decls := map[string]bool{}
		files, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					name := d.Name.Name
					if d.Recv != nil && len(d.Recv.List) == 1 {
						r := d.Recv.List[0].Type
						if s, ok := r.(*ast.StarExpr); ok {
							r = s.X
						}
						if id, ok := r.(*ast.Ident); ok {
							name = id.Name + "." + name
						}
					}
					decls[name] = true
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							decls[s.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range s.Names {
								decls[n.Name] = true
							}
						}
					}
				}
			}
		}
		if len(files) == 0 {
			t.Errorf("%s: no package %s", l[0], pkg)
		} else if sym != "" && !decls[sym] {
			t.Errorf("%s: %s has no %s", l[0], pkg, sym)
		}
	}
}
