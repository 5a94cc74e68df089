package nemo

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pytar"
)

type file struct {
	name string
	body string
	typ  byte
}

func archive(t testing.TB, format tar.Format, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, f := range files {
		typ := f.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: f.name, Typeflag: typ, Mode: 0o644, Format: format}
		if typ == tar.TypeReg {
			h.Size = int64(len(f.body))
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
	}
	w.Close()
	return buf.Bytes()
}

// TestIndex locates every regular member's bytes as archive/tar reads them: "./" names
// cleaned, long names (GNU and PAX), folders skipped, a later member replacing an earlier
// one of the same name.
func TestIndex(t *testing.T) {
	long := "./" + strings.Repeat("tokenizer/", 12) + "vocab.json"
	for _, format := range []tar.Format{tar.FormatGNU, tar.FormatPAX, tar.FormatUSTAR} {
		files := []file{{"./", "", tar.TypeDir}, {"./model_config.yaml", "a: 1\n", 0}, {"./mp_rank_00/", "", tar.TypeDir},
			{"./mp_rank_00/model_weights.ckpt", strings.Repeat("w", 700), 0}, {"./model_config.yaml", "a: 2\n", 0}}
		if format != tar.FormatUSTAR {
			files = append(files, file{long, "{}", 0})
		}
		data := archive(t, format, files...)
		ms, err := Index(data)
		if err != nil {
			t.Fatalf("%v: %v", format, err)
		}
		want := map[string]string{"model_config.yaml": "a: 2\n", "mp_rank_00/model_weights.ckpt": strings.Repeat("w", 700)}
		if format != tar.FormatUSTAR {
			want[strings.TrimPrefix(long, "./")] = "{}"
		}
		if len(ms) != len(want) {
			t.Fatalf("%v: %+v", format, ms)
		}
		for _, m := range ms {
			if got := string(data[m.Offset : m.Offset+m.Size]); got != want[m.Name] {
				t.Errorf("%v %s: %q, want %q", format, m.Name, got, want[m.Name])
			}
		}
		if !IsArchive(ms) {
			t.Errorf("%v: not taken for a .nemo archive", format)
		}
	}
}

// TestIndexRefuses: truncated members, bad checksums, names leaving the archive, a PAX
// size contradicting the header's, a size past the end — each named with its member and
// byte offset (issue 29, class 9).
func TestIndexRefuses(t *testing.T) {
	good := archive(t, tar.FormatGNU, file{"./model_weights.ckpt", strings.Repeat("x", 1000), 0})
	badSum := bytes.Clone(good)
	badSum[0] ^= 1
	// A PAX record saying 2000 bytes before a header saying 1000: tarfile takes the PAX
	// size (and its member then runs past the end).
	var lying bytes.Buffer
	w := tar.NewWriter(&lying)
	w.WriteHeader(&tar.Header{Name: "model_config.yaml", Size: 2, Mode: 0o644, Typeflag: tar.TypeReg})
	w.Write([]byte("a\n"))
	w.WriteHeader(&tar.Header{Name: "model_weights.ckpt", Size: 1000, Mode: 0o644, Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "x"}})
	w.Write(make([]byte, 1000))
	w.Write(make([]byte, 4096))
	w.Close()
	lie := bytes.Replace(lying.Bytes(), []byte("13 comment=x\n"), []byte("13 size=1200\n"), 1)
	for name, c := range map[string]struct {
		data   []byte
		format string // the FormatError's: pytar's reading, or NeMo's restore
		member string
		off    int64
		says   string
	}{
		"truncated":  {good[:900], pytar.Format, "./model_weights.ckpt", 0, `tar: "./model_weights.ckpt": byte 0: 1000 bytes at byte 512 run past the end of the 900-byte archive`},
		"checksum":   {badSum, pytar.Format, "", 0, "bad checksum"},
		"escape":     {archive(t, tar.FormatGNU, file{"../../etc/x", "y", 0}), Format1, "../../etc/x", 0, `nemo: "../../etc/x": byte 0: its name is absolute or climbs out of the archive (NeMo's restore skips it)`},
		"absolute":   {archive(t, tar.FormatGNU, file{"/etc/x", "y", 0}), Format1, "/etc/x", 0, `nemo: "/etc/x": byte 0: its name is absolute`},
		"lying PAX":  {lie, Format1, "model_weights.ckpt", 1024, `nemo: "model_weights.ckpt": byte 1024: its PAX record gives 1200 bytes, its header 1000`},
		"short head": {good[:100], pytar.Format, "", 0, "truncated header"},
	} {
		_, err := Index(c.data)
		var fe *ckpterr.FormatError
		if !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), c.says) || !errors.As(err, &fe) ||
			fe.Format != c.format || fe.Item != c.member || fe.Offset != c.off || fe.File != "" {
			t.Errorf("%s: %v, want %q", name, err, c.says)
		}
	}
}

func FuzzIndex(f *testing.F) {
	f.Add(archive(f, tar.FormatGNU, file{"./model_config.yaml", "a", 0}, file{"./model_weights.ckpt", "PK", 0}))
	f.Add(archive(f, tar.FormatPAX, file{"./" + strings.Repeat("d/", 60) + "model_weights.ckpt", "x", 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := Index(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Offset < 0 || m.Size < 0 || m.Offset+m.Size > int64(len(data)) {
				t.Fatalf("%+v outside %d bytes", m, len(data))
			}
			if _, err := cleanName(m.Name); err != nil {
				t.Fatalf("%+v: %v", m, err)
			}
		}
		IsArchive(ms)
		IsGzipArchive(data)
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

// TestIndexAtReadsHeaders: indexing an archive reads its headers and long-name records,
// not its members' bytes (an archive in a bucket is indexed without fetching the weights),
// and finds what Index finds.
func TestIndexAtReadsHeaders(t *testing.T) {
	big := strings.Repeat("w", 8<<20)
	data := archive(t, tar.FormatGNU,
		file{"./model_config.yaml", "a: 1\n", 0},
		file{"./tp_rank_00_pp_rank_000/model_weights.ckpt", big, 0},
		file{"./" + strings.Repeat("long/", 40) + "tokenizer.model", "tok", 0},
		file{"./tp_rank_01_pp_rank_000/model_weights.ckpt", big, 0})
	want, err := Index(data)
	if err != nil {
		t.Fatal(err)
	}
	r := &countingReader{r: bytes.NewReader(data)}
	got, err := IndexAt(r, int64(len(data)), "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || len(got) != 4 {
		t.Fatalf("IndexAt found %v, Index %v", got, want)
	}
	if r.n > 4*(64<<10) {
		t.Errorf("indexing read %d of the archive's %d bytes", r.n, len(data))
	}
}
