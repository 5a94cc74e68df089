package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// The fixtures of testdata/hostile/round3.py (issue 29): files that real torch (or NeMo's
// restore, or numpy) reads differently from what ckpt's scanner used to read. round3.py
// writes them in the oracle and loads each the way its loader does (the loader is in the
// name's prefix), reporting whether the payload ran.

// round3Payloads are the fixtures whose loader runs the payload, with a word the scan's
// refusal (exit 3) must name.
var round3Payloads = map[string]string{
	// Tar archives read as Python's tarfile reads them.
	"torch_tar_v7_prefix.pt":      `tar member "pickle"`, // a V7 header's prefix renames the later "pickle"
	"torch_tar_python_rejects.pt": "posix.system",        // tarfile refuses the header: torch unpickles byte 0
	"torch_tar_listing_fails.pt":  "byte 0",              // tarfile cannot list it: torch unpickles byte 0
	"torch_nemo_and_tar.nemo":     `tar member "pickle"`, // a .nemo archive that is a legacy torch tar too
	"torch_tar_hardlink.pt":       `tar member "pickle" (linked to "object")`,
	// torch finds zip records whatever their case.
	"torch_zip_upper.pt": "DATA.PKL",
	"torch_zip_both.pt":  "DATA.PKL",
	// Pickles beyond the scanner's limits, alone and in a Trainer checkpoint folder.
	"torch_deep.pkl": "beyond the scanner's limits",
	"trainer_deep":   "training_args.bin",
	// An argument past the end of its FRAME, read as CPython before 3.14.7 reads it.
	"oldpy_frame_straddle.pt": "posix.system",
	// numpy arrays of objects.
	"numpy_object.npy":     "posix.system",
	"numpy_object.npz":     `npz member "arr_1.npy"`,
	"numpy_pickle.npy":     "posix.system",
	"numpy_folder":         "optimizer_state.npy",
	"numpy_structured.npy": "posix.system",
}

// generateRound3 writes the fixtures into a fresh oracle folder and returns it (host path)
// with the loaders' report on each.
func generateRound3(t *testing.T) (string, map[string]round3Load) {
	t.Helper()
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if out, err := o.Python("testdata/hostile/round3.py", "gen", chroot); err != nil {
		t.Fatalf("round3.py gen: %v\n%s", err, out)
	}
	names, _ := os.ReadDir(host)
	args := []string{"testdata/hostile/round3.py", "check"}
	for _, n := range names {
		args = append(args, chroot+"/"+n.Name())
	}
	out, err := o.Python(args...)
	if err != nil {
		t.Fatalf("round3.py check: %v\n%s", err, out)
	}
	var rep map[string]round3Load
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	byName := map[string]round3Load{}
	for k, v := range rep {
		byName[filepath.Base(k)] = v
	}
	return host, byName
}

type round3Load struct {
	Executed bool
	Error    string
	Result   []string // the members NeMo's restore skipped
}

// TestScanRound3: every fixture whose loader really runs its payload (the marker file
// appears in the oracle) scans exit 3 naming it, freshly generated and as committed; the
// same bytes under the readings that run nothing (the oracle's CPython 3.14, which refuses
// the FRAME straddle; NeMo's restore of the .nemo that is also a legacy tar) scan exit 3
// too. Before the scanner read archives, pickles and numpy files as the loaders do, 7 of
// the 14 scanned clean (exit 0) and the others exit 1.
func TestScanRound3(t *testing.T) {
	dir, loads := generateRound3(t)
	for name, want := range round3Payloads {
		t.Run(name, func(t *testing.T) {
			if r, ok := loads[name]; !ok || !r.Executed {
				t.Fatalf("the loader did not run the payload of %s: %+v", name, r)
			}
			for _, p := range []string{filepath.Join(dir, name), filepath.Join("../../testdata/hostile/round3", name)} {
				out, err := run(t, "scan", p)
				if exitStatus(err) != exitDangerous || !strings.Contains(err.Error(), want) {
					t.Errorf("scan %s: %v (want exit 3 naming %s)\n%s", p, err, want, out)
				}
			}
		})
	}
	t.Run("the readings that run nothing", func(t *testing.T) {
		if r := loads["torch_frame_straddle.pt"]; r.Executed || !strings.Contains(r.Error, "pickle exhausted before end of frame") {
			t.Errorf("CPython 3.14.10 should refuse the straddle: %+v", r)
		}
		if r := loads["nemo_nemo_and_tar.nemo"]; r.Executed || r.Error != "" {
			t.Errorf("NeMo's restore of the archive loads its clean weights: %+v", r)
		}
		for _, name := range []string{"torch_frame_straddle.pt", "nemo_nemo_and_tar.nemo"} {
			if _, err := run(t, "scan", filepath.Join(dir, name)); exitStatus(err) != exitDangerous {
				t.Errorf("scan %s: %v, want exit 3", name, err)
			}
		}
	})
}

// TestNemoBadTars: .nemo archives with a member named "../escaped.txt" or
// "/tmp/ckpt-absolute.txt" (NeMo's restore skips it), a PAX size that contradicts its
// header's (tarfile reads the PAX size), a size past the end (tarfile raises ReadError):
// inspect and convert refuse each naming the member and its byte offset, scan cannot vouch
// (exit 1) naming it — never "a tar-format torch.save file from the earliest PyTorch
// releases", which they all said before (issue 29, class 9).
func TestNemoBadTars(t *testing.T) {
	dir, loads := generateRound3(t)
	for name, c := range map[string]struct {
		restore string   // what NeMo's restore does: the member it skips, or its error
		says    []string // the member, its offset, what is wrong
	}{
		"nemo_dotdot.nemo":   {"../escaped.txt", []string{`"../escaped.txt"`, "byte 7168: its name is absolute or climbs out of the archive"}},
		"nemo_absolute.nemo": {"/tmp/ckpt-absolute.txt", []string{`"/tmp/ckpt-absolute.txt"`, "byte 7168: its name is absolute or climbs out of the archive"}},
		"nemo_pax_size.nemo": {"", []string{`"./tokenizer.model"`, "byte 7168: its PAX record gives 1024 bytes, its header 3"}},
		"nemo_huge.nemo":     {"ReadError: unexpected end of data", []string{`"./vocab.txt"`, "byte 7168: 17179869184 bytes at byte 7680 run past the end of the 8707-byte archive"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := loads[name]
			switch {
			case strings.HasPrefix(c.restore, "ReadError"):
				if r.Error != c.restore {
					t.Errorf("NeMo's restore: %+v, want %s", r, c.restore)
				}
			case c.restore != "":
				if r.Error != "" || len(r.Result) != 1 || r.Result[0] != c.restore {
					t.Errorf("NeMo's restore: %+v, want it to skip %s and load the weights", r, c.restore)
				}
			default:
				if r.Error != "" || r.Executed {
					t.Errorf("NeMo's restore: %+v, want it to load the weights", r)
				}
			}
			p := filepath.Join(dir, name)
			for _, args := range [][]string{{"inspect", p}, {"convert", "--to", "tpu", p, filepath.Join(t.TempDir(), "out")}, {"scan", p}} {
				_, err := run(t, args...)
				if err == nil || !strings.Contains(err.Error(), c.says[0]) || !strings.Contains(err.Error(), c.says[1]) || strings.Contains(err.Error(), "earliest PyTorch") {
					t.Errorf("%s: %v, want an error naming %q", args[0], err, c.says)
				}
				if args[0] == "scan" && exitStatus(err) != exitFailure {
					t.Errorf("scan: exit %d, want 1", exitStatus(err))
				}
			}
		})
	}
}

// TestHostileZstd: DCP folders torch wrote with its ZStandard extension whose tensor's
// item became a 192 KiB zstd frame inflating to 6 GiB of zeros (issue 29, class 6), with
// a metadata saying the tensor holds 4 TiB, or 6 GiB, or an item that starts as a zip
// record named data.pkl: scan, inspect --hash and convert each fail in a second with an
// error naming the item, in bounded memory — no out-of-memory crash (before, each inflated
// until it ran out).
func TestHostileZstd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs it under resource limits")
	}
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not installed")
	}
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if out, err := o.Python("testdata/hostile/round3.py", "gen", chroot, "--resources"); err != nil {
		t.Fatalf("round3.py gen: %v\n%s", err, out)
	}
	out := t.TempDir()
	for name, says := range map[string]string{
		"res_dcp_zstd_claim":  "regenerate at most",
		"res_dcp_zstd_zeros":  "not a torch.save archive",
		"res_dcp_zstd_forged": "data.pkl",
	} {
		p := filepath.Join(host, name)
		for _, args := range [][]string{{"scan", p}, {"inspect", "--hash", p}, {"convert", "--to", "tpu", p, filepath.Join(out, name)}} {
			stderr, code, rss := limited(t, 1<<30, args...)
			if crashed(stderr) || code != 1 || !strings.Contains(stderr, says) || !strings.Contains(stderr, `"w"`) || rss > 256<<10 {
				t.Errorf("ckpt %s %s: exit %d, peak RSS %d MiB\n%.1500s\nwant exit 1 naming item \"w\" and %q", args[0], name, code, rss>>10, stderr, says)
			}
		}
	}
}

// TestScanZstdEnds: a DCP item torch's ZStandard extension would compress, inflating past
// what the scan keeps of it (24 MiB: its first and last 16 MiB are kept), scans clean —
// the archive's headers, pickle and directory are in its ends — and reads whole.
func TestScanZstdEnds(t *testing.T) {
	const n = 6 << 20 // float32 zeros: 24 MiB
	hdr := []byte(fmt.Sprintf(`{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, n, 4*n))
	hdr = append(hdr, bytes.Repeat([]byte(" "), (8-len(hdr)%8)%8)...)
	src := filepath.Join(t.TempDir(), "big.safetensors")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))))
	f.Write(hdr)
	f.Write(make([]byte, 4*n))
	f.Close()
	dst := filepath.Join(t.TempDir(), "dcp")
	if _, err := run(t, "convert", "--to", "tpu", "--format", "dcp", "--compress", "zstd", src, dst); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "scan", dst); err != nil {
		t.Errorf("scan: %v\n%s", err, out)
	}
	if out, err := run(t, "inspect", "--hash", dst); err != nil || !strings.Contains(out, "24.0 MiB") {
		t.Errorf("inspect --hash: %v\n%s", err, out)
	}
}
