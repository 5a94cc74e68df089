package pytar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// goTar writes files with archive/tar in the given format.
func goTar(t testing.TB, format tar.Format, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, h := range hs {
		h := *h
		h.Format = format
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			w.Write(bytes.Repeat([]byte{'d'}, int(h.Size)))
		}
	}
	w.Close()
	return buf.Bytes()
}

func reg(name string, size int64) *tar.Header {
	return &tar.Header{Name: name, Size: size, Typeflag: tar.TypeReg}
}

// v7header builds one 512-byte header from fields (octal numbers as tar writes them) with a
// valid checksum.
func v7header(name string, typ byte, size int64, prefix, magic string) []byte {
	h := make([]byte, 512)
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], fmt.Sprintf("%011o\x00", size))
	copy(h[136:], "00000000000\x00")
	h[156] = typ
	copy(h[257:], magic)
	copy(h[345:], prefix)
	fixChecksum(h)
	return h
}

func fixChecksum(h []byte) {
	copy(h[148:156], "        ")
	var u int64
	for _, c := range h {
		u += int64(c)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", u))
}

func pad(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// TestRead: what tarfile reads and archive/tar does not — the ustar prefix on a V7 header,
// numbers in Python's int() syntax, device numbers that are not numbers, a member whose
// bytes run past the end — and the places the readers differ.
func TestRead(t *testing.T) {
	v7 := v7header("pickle", '0', 3, "evil", "")
	v7 = append(v7, pad([]byte("abc"))...)
	plus := v7header("storages", '0', 3, "", "ustar\x0000")
	copy(plus[124:136], "+0o3\x00       ")
	fixChecksum(plus)
	plus = append(plus, pad([]byte("abc"))...)
	badDev := v7header("storages", '0', 0, "", "ustar\x0000")
	copy(badDev[329:337], "junk\x00\x00\x00\x00")
	fixChecksum(badDev)
	huge := append(v7header("tensors", '0', 1<<20, "", "ustar\x0000"), pad([]byte("abc"))...)
	negative := v7header("x", '0', 0, "", "ustar\x0000")
	negative[124] = 0xff
	fixChecksum(negative)
	paxSize := goTar(t, tar.FormatPAX, &tar.Header{Name: "model_weights.ckpt", Size: 5, Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "x"}})
	tests := []struct {
		name  string
		data  []byte
		names []string
		err   error // ErrNotTar (from Read), ErrRead or ErrUnsure (Archive.Err), nil
	}{
		{"ustar", goTar(t, tar.FormatUSTAR, reg("storages", 10), reg("tensors", 0), reg("pickle", 600)), []string{"storages", "tensors", "pickle"}, nil},
		{"V7 header with a prefix", append(append(append([]byte{}, v7...), v7header("pickle", '0', 0, "", "")...), make([]byte, 1024)...), []string{"evil/pickle", "pickle"}, nil},
		{"Python int syntax", plus, []string{"storages"}, nil},
		{"device number not a number", badDev, nil, ErrNotTar},
		{"bytes past the end", append(goTar(t, tar.FormatUSTAR, reg("storages", 1))[:1024], huge...), []string{"storages", "tensors"}, ErrRead},
		{"negative size", negative, nil, ErrUnsure},
		{"PAX", paxSize, []string{"model_weights.ckpt"}, nil},
		{"empty file", nil, nil, ErrNotTar},
		{"zero blocks", make([]byte, 1024), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Read(bytes.NewReader(tt.data), int64(len(tt.data)))
			if tt.err == ErrNotTar || (tt.err == ErrUnsure && len(tt.names) == 0) {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Read: %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range a.Members {
				names = append(names, m.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.names, ",") || !errors.Is(a.Err, tt.err) || (tt.err == nil) != (a.Err == nil) {
				t.Errorf("members %q, err %v; want %q, %v", names, a.Err, tt.names, tt.err)
			}
		})
	}
}

// mutate returns a variant of a tar archive: header fields set to values the readers
// parse differently, records rewritten, bytes flipped, the archive cut.
func mutate(rng *rand.Rand, data []byte) []byte {
	b := bytes.Clone(data)
	nblocks := len(b) / 512
	if nblocks == 0 {
		return b
	}
	values := []string{"+17", "-1", "0o17", "1_7", " 17 ", "17 ", "\t17", "0x11", "1__7", "_17", "9", "", "\x80", "١٧", "0O_7", "7\x00junk", "77777777777", "00000000001"}
	fields := [][2]int{{0, 100}, {100, 108}, {108, 116}, {116, 124}, {124, 136}, {136, 148}, {148, 156}, {157, 257}, {257, 263}, {263, 265}, {329, 337}, {337, 345}, {345, 500}}
	for n := rng.Intn(3) + 1; n > 0; n-- {
		blk := rng.Intn(min(nblocks, 8)) * 512
		h := b[blk : blk+512]
		switch rng.Intn(7) {
		case 0: // a numeric field
			f := fields[1+rng.Intn(6)]
			if rng.Intn(4) == 0 {
				f = fields[10+rng.Intn(2)]
			}
			v := values[rng.Intn(len(values))]
			clear(h[f[0]:f[1]])
			copy(h[f[0]:f[1]], v)
			if rng.Intn(5) == 0 {
				h[f[0]] = []byte{0x80, 0xff}[rng.Intn(2)]
			}
		case 1: // the type
			h[156] = "0\x001257LKxgXSZ"[rng.Intn(13)]
		case 2: // a prefix or a name
			f := fields[[]int{0, 12, 7}[rng.Intn(3)]]
			clear(h[f[0]:f[1]])
			copy(h[f[0]:f[1]], []string{"evil", "a/", "pickle", "storages/", "x\x00y", "./model_weights.ckpt", "../x", "/abs"}[rng.Intn(8)])
		case 3: // the magic
			copy(h[257:265], []string{"ustar\x0000", "ustar  \x00", "\x00\x00\x00\x00\x00\x00\x00\x00", "ustar\x00xx"}[rng.Intn(4)])
		case 4: // a byte
			h[rng.Intn(512)] = byte(rng.Intn(256))
		case 5: // PAX records in a block
			recs := []string{"9 size=5\n", "10 size=+5\n", "11 size=1_0\n", "10 size=-1\n", "15 path=x/pickle\n", "16 path=storages/\n", "4 a=\n", "5 a=b", "12 hdrcharset\n", "8 comm=\n", "00009 a=bc\n", "9 path=\n"}
			var r string
			for k := rng.Intn(3) + 1; k > 0; k-- {
				r += recs[rng.Intn(len(recs))]
			}
			if blk+512+512 <= len(b) {
				d := b[blk+512 : blk+1024]
				clear(d)
				copy(d, r)
				clear(h[124:136])
				copy(h[124:136], fmt.Sprintf("%011o", len(r)))
				h[156] = "xgX"[rng.Intn(3)]
			}
		case 6: // cut
			return b[:rng.Intn(len(b)+1)]
		}
		if rng.Intn(6) != 0 {
			fixChecksum(h)
		}
	}
	return b
}

// corpus is the archives the differential test and the fuzz target start from.
func corpus(t testing.TB) [][]byte {
	long := strings.Repeat("long/", 30) + "model_weights.ckpt"
	out := [][]byte{
		goTar(t, tar.FormatUSTAR, reg("storages", 10), reg("tensors", 0), reg("pickle", 600)),
		goTar(t, tar.FormatGNU, &tar.Header{Name: "./", Typeflag: tar.TypeDir}, reg("./model_config.yaml", 5), reg("./"+long, 700), &tar.Header{Name: "./link", Linkname: "./model_config.yaml", Typeflag: tar.TypeSymlink}),
		goTar(t, tar.FormatPAX, reg(long, 3), &tar.Header{Name: "h", Linkname: long, Typeflag: tar.TypeLink}, reg("pickle", 1)),
		goTar(t, tar.FormatUSTAR, reg(strings.Repeat("p/", 60)+"pickle", 4), &tar.Header{Name: "d/", Typeflag: tar.TypeDir}, reg("tensors", 513)),
		append(append(v7header("storages", 0, 2, "", ""), pad([]byte("ab"))...), append(v7header("dir/", 0, 0, "", ""), make([]byte, 1024)...)...),
	}
	return out
}

// FuzzRead: any bytes are read without a panic, with the members inside the file (their
// data too, except for the member whose data runs past it, which ends the list with
// ErrRead), offsets increasing, and allocation bounded by the records' limit.
func FuzzRead(f *testing.F) {
	rng := rand.New(rand.NewSource(1))
	for _, c := range corpus(f) {
		f.Add(c)
		for i := 0; i < 8; i++ {
			f.Add(mutate(rng, c))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var e *ckpterr.FormatError
			if !errors.As(err, &e) || e.Format != Format || !(errors.Is(err, ErrNotTar) && errors.Is(err, ckpterr.ErrCorrupt) ||
				errors.Is(err, ErrUnsure) && errors.Is(err, ckpterr.ErrUnsupported) && !errors.Is(err, ckpterr.ErrCorrupt)) {
				t.Fatalf("Read: %v", err)
			}
			return
		}
		prev := int64(-1)
		for i, m := range a.Members {
			if m.Offset <= prev || m.Offset < 0 || m.Offset+512 > int64(len(data)) || m.Data < m.Offset+512 || m.Data > int64(len(data)) {
				t.Fatalf("member %d %+v in %d bytes (previous at %d)", i, m, len(data), prev)
			}
			if m.HasData() && (m.Size < 0 || m.Data+m.Size > int64(len(data))) && !(i == len(a.Members)-1 && errors.Is(a.Err, ErrRead)) {
				t.Fatalf("member %d %+v: bytes outside %d", i, m, len(data))
			}
			prev = m.Offset
		}
		if a.Err != nil && !errors.Is(a.Err, ErrRead) && !errors.Is(a.Err, ErrUnsure) {
			t.Fatalf("Archive.Err %v", a.Err)
		}
	})
}
