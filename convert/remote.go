package convert

import (
	"bytes"
	"io"
	"path"
	"strings"

	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// createRemote starts the file name of an output in object storage: a manifest is held
// back and uploaded by commit after every other file (its presence means the output is
// complete); other files stream up as they are written.
func (o *output) createRemote(name string) (io.WriteCloser, error) {
	if path.Base(name) == manifest.Name || strings.HasSuffix(name, "."+manifest.Name) {
		return o.lastFile(name), nil
	}
	w, err := o.remote.Create(name)
	if err != nil {
		return nil, err
	}
	return &remoteStream{o: o, w: w}, nil
}

// lastFile is a file of the output held in memory until commit.
func (o *output) lastFile(name string) io.WriteCloser {
	return &held{o: o, name: name}
}

type held struct {
	o    *output
	name string
	buf  bytes.Buffer
}

func (h *held) Write(p []byte) (int, error) { return h.buf.Write(p) }
func (h *held) Close() error {
	h.o.mu.Lock()
	h.o.last = append(h.o.last, storage.NamedBytes{Name: h.name, Data: h.buf.Bytes()})
	h.o.mu.Unlock()
	return nil
}

// remoteStream is one upload: bytes pass on in pieces small enough that the source's
// pages can be released between them, each piece first checking for cancellation.
type remoteStream struct {
	o *output
	w io.WriteCloser
}

func (s *remoteStream) Write(b []byte) (int, error) { return s.o.inPieces(b, s.w.Write) }

// WriteRange uploads a reader's range from the bytes its source lends (statedict.Lender: a
// bucket stream's blocks, bucket → bucket), copied once, into the upload's part, instead
// of through a buffer first; other ranges go as statedict.WriteRange writes them.
func (s *remoteStream) WriteRange(r statedict.Range) (int64, error) {
	var done int64
	for n := r.Len(); done < n; {
		if err := s.o.ctx.Err(); err != nil {
			return done, err
		}
		b, release, ok, err := r.Lend(done, min(n-done, releaseEvery/4))
		if err != nil {
			return done, err
		}
		if !ok {
			m, err := statedict.WriteRange(struct{ io.Writer }{s}, r.Slice(done, n)) // Write only: no recursion
			return done + m, err
		}
		m, err := s.w.Write(b)
		for _, h := range r.Sums {
			h.Write(b[:m])
		}
		release()
		done += int64(m)
		s.o.streamed(int64(m))
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (s *remoteStream) Close() error { return s.w.Close() }
