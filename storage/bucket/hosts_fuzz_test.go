package bucket

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// FuzzParseJournal: a host's journal object, as anyone with write access to the prefix
// could leave it, parses without a panic, and what it accepts names only files inside the
// folder, each started or finished with a digest, and survives a round trip.
func FuzzParseJournal(f *testing.F) {
	for _, s := range []string{
		`[{"file":"__0_0.distcp","size":-1,"xxhash64":""},{"file":"__0_0.distcp","size":12,"xxhash64":"0123456789abcdef"}]`,
		`[{"file":"../x","size":1,"xxhash64":"0123456789abcdef"}]`,
		`[{"file":"a//b","size":-1}]`, `[{"file":"a","size":-2}]`, `null`, `{}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := parseJournal(b)
		if err != nil {
			return
		}
		for _, e := range j {
			if !validName(e.File) || strings.HasPrefix(e.File, "/") || strings.Contains("/"+e.File+"/", "/../") {
				t.Fatalf("accepted the name %q", e.File)
			}
			if e.Size != multihost.StartedSize && len(e.XXHash64) != 16 {
				t.Fatalf("accepted a finished entry without a digest: %+v", e)
			}
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseJournal(again); err != nil {
			t.Fatalf("its own output is refused: %v", err)
		}
	})
}
