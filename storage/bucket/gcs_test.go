package bucket

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// resumableServer plays the service's side of a JSON API resumable upload as the GCS
// documentation describes it, including what the emulator never does: it keeps only the
// first keep bytes of a chunk (in units of 256 KiB, answering 308 with the Range it holds),
// and fails the first PUT of some chunks with 503 without keeping anything.
type resumableServer struct {
	t        *testing.T
	keep     int64 // bytes of a chunk kept on its first PUT (0: all)
	failEach int   // every failEach-th PUT fails with 503 (0: none)

	mu    sync.Mutex
	data  []byte
	puts  int
	seen  map[int64]bool // chunk starts already PUT once
	ranks []string       // the Content-Range of every PUT
	made  bool
}

func (s *resumableServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Query().Get("uploadType") == "resumable":
		w.Header().Set("Location", "http://"+r.Host+"/session")
		return
	case r.Method != http.MethodPut || r.URL.Path != "/session":
		http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	cr := r.Header.Get("Content-Range")
	s.ranks = append(s.ranks, cr)
	if s.puts++; s.failEach > 0 && s.puts%s.failEach == 0 {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	rng, total, _ := strings.Cut(strings.TrimPrefix(cr, "bytes "), "/")
	if rng != "*" {
		a, b, _ := strings.Cut(rng, "-")
		start, _ := strconv.ParseInt(a, 10, 64)
		end, _ := strconv.ParseInt(b, 10, 64)
		if start != int64(len(s.data)) || end-start+1 != int64(len(body)) {
			s.t.Errorf("PUT %s of %d bytes while the service holds %d", cr, len(body), len(s.data))
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if total == "*" && len(body)%(256<<10) != 0 {
			s.t.Errorf("PUT %s: a chunk before the last is not a multiple of 256 KiB", cr)
		}
		kept := body
		if s.keep > 0 && !s.seen[start] && total == "*" {
			s.seen[start] = true
			kept = body[:min(int64(len(body)), s.keep)]
		}
		s.data = append(s.data, kept...)
	}
	if total != "*" && strconv.Itoa(len(s.data)) == total {
		s.made = true
		fmt.Fprintf(w, `{"name":"k","size":"%d"}`, len(s.data))
		return
	}
	if len(s.data) > 0 {
		w.Header().Set("Range", fmt.Sprintf("bytes=0-%d", len(s.data)-1))
	}
	w.WriteHeader(http.StatusPermanentRedirect)
}

// TestResumableUploadResumes: a GCS upload larger than a chunk goes up as a resumable
// upload whose chunks are whole multiples of 256 KiB but the last; a chunk the service kept
// only part of is continued from where the service's Range says it stopped, and one whose
// request failed is sent again — the object holds exactly the bytes written.
func TestResumableUploadResumes(t *testing.T) {
	data := make([]byte, 2*UploadBuffer+UploadBuffer/3+7)
	for i := range data {
		data[i] = byte(i*31 + i>>11)
	}
	for _, c := range []struct {
		name     string
		keep     int64
		failEach int
	}{
		{"whole chunks", 0, 0},
		{"part of each chunk kept", 5 << 18, 0},
		{"failed requests", 0, 2},
		{"both", 3 << 18, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &resumableServer{t: t, keep: c.keep, failEach: c.failEach, seen: map[int64]bool{}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			g := &gcsAPI{c: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, base: srv.URL, bucket: "b"}
			w := g.writer(context.Background(), "k", PutOptions{})
			for off := 0; off < len(data); off += 1 << 20 {
				if _, err := w.Write(data[off:min(len(data), off+1<<20)]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatalf("close: %v (ranges %q)", err, s.ranks)
			}
			if !s.made || !bytes.Equal(s.data, data) {
				t.Fatalf("the object holds %d bytes (made %v), %d written; ranges %q", len(s.data), s.made, len(data), s.ranks)
			}
			if c.keep > 0 && len(s.ranks) < 5 {
				t.Errorf("ranges %q: no chunk was continued", s.ranks)
			}
			t.Logf("%d requests", len(s.ranks))
		})
	}
}
