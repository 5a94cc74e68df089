package pytar

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// TestReadAsTarfile: on thousands of archives — tar, GNU and PAX archives as writers make
// them, and variants with header fields in every syntax Python's int() takes or refuses,
// prefixes on V7 headers, other types and magics, PAX records well and badly formed,
// flipped bytes, cut files — Read lists what CPython's tarfile (the oracle's 3.14) lists:
// the same members, names, types, offsets and sizes, the same failure of tarfile.open
// (ErrNotTar) and of the listing (ErrRead), and the same silent end. Where Read says the
// readers differ (ErrUnsure), only the members before that point are compared.
func TestReadAsTarfile(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	rng := rand.New(rand.NewSource(29))
	var archives [][]byte
	for _, c := range corpus(t) {
		archives = append(archives, c)
		for i := 0; i < 600; i++ {
			archives = append(archives, mutate(rng, c))
		}
	}
	args := []string{"formats/pytar/testdata/members.py"}
	for i, a := range archives {
		name := fmt.Sprintf("%04d.tar", i)
		if err := os.WriteFile(filepath.Join(host, name), a, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, chroot+"/"+name)
	}
	out, err := o.Python(args...)
	if err != nil {
		t.Fatal(err)
	}
	var py map[string]struct {
		Open    *string
		Members [][]any
		End     *string
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatal(err)
	}
	var kinds = map[string]int{}
	for i, data := range archives {
		p := py[fmt.Sprintf("%s/%04d.tar", chroot, i)]
		a, err := Read(bytes.NewReader(data), int64(len(data)))
		fail := func(format string, args ...any) {
			t.Errorf("archive %d (%d bytes): %s\npython: open %v, end %v, members %v\nhex: %x", i, len(data), fmt.Sprintf(format, args...), deref(p.Open), deref(p.End), p.Members, data[:min(len(data), 600)])
		}
		if err != nil {
			switch {
			case errors.Is(err, ErrUnsure):
				kinds["unsure at open"]++
			case errors.Is(err, ErrNotTar):
				kinds["not a tar"]++
				if p.Open == nil || *p.Open != "ReadError" {
					fail("Read: %v, tarfile.open did not raise ReadError", err)
				}
			default:
				fail("Read: %v", err)
			}
			continue
		}
		if p.Open != nil {
			fail("tarfile.open raised %s, Read opened it: %d members, %v", *p.Open, len(a.Members), a.Err)
			continue
		}
		n := len(a.Members)
		if !errors.Is(a.Err, ErrUnsure) && n != len(p.Members) || n > len(p.Members) {
			fail("Read lists %d members (%v), tarfile %d", n, a.Err, len(p.Members))
			continue
		}
		for j, m := range a.Members {
			pm := p.Members[j]
			want := fmt.Sprint(pm[0], " ", pm[1], " ", pm[2], " ", pm[3], " ", pm[4], " ", pm[5])
			got := fmt.Sprint(hex.EncodeToString([]byte(m.Name)), " ", hex.EncodeToString([]byte(m.Linkname)), " ", hex.EncodeToString([]byte{m.Type}), " ", m.Offset, " ", m.Data, " ", m.Size)
			if m.Type == 0 {
				got = fmt.Sprint(hex.EncodeToString([]byte(m.Name)), " ", hex.EncodeToString([]byte(m.Linkname)), " 00 ", m.Offset, " ", m.Data, " ", m.Size)
			}
			if got != want {
				fail("member %d: Read %s, tarfile %s", j, got, want)
			}
		}
		switch {
		case errors.Is(a.Err, ErrUnsure):
			kinds["unsure"]++
		case errors.Is(a.Err, ErrRead):
			kinds["read error"]++
			if p.End == nil || *p.End != "ReadError" {
				fail("Read ends with %v, tarfile with %v", a.Err, deref(p.End))
			}
		default:
			kinds["ok"]++
			if p.End != nil {
				fail("Read ends cleanly, tarfile raises %s", *p.End)
			}
		}
	}
	t.Logf("%d archives: %v", len(archives), kinds)
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
