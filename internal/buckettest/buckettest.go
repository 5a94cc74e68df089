// Package buckettest starts object storage servers on loopback for tests and benchmarks:
// a GCS emulator and an S3-compatible server, both in process over real HTTP, so the real
// clients talk to them. A handler wrapper injects faults (failed or reset requests,
// delays) into a fraction of the requests and counts the bytes served.
//
// The emulators themselves (fake-gcs-server, gofakes3) are set with Use by each test
// package that starts servers, in a _test.go file (emulators_test.go), and by the bench
// programs' own module (scripts/bench): no non-test build of ckpt's module links them.
package buckettest

import (
	"errors"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Emulators make the servers' handlers.
type Emulators struct {
	// GCS is a GCS emulator holding the named (empty) buckets, served at url (objects under
	// the folder root, in memory for "").
	GCS func(url, root string, buckets []string) (http.Handler, error)
	// S3 is an S3 server holding the named (empty) buckets.
	S3 func(buckets []string) (http.Handler, error)
}

var emulators Emulators

// Use sets the emulators GCS, GCSIn, S3 and Start run.
func Use(e Emulators) { emulators = e }

// errNoEmulator is returned when no emulator was set (Use).
var errNoEmulator = errors.New("buckettest: no emulator set: call buckettest.Use in a _test.go file (emulators_test.go)")

// Faults says which requests fail or wait. Rates are fractions of the matching requests.
type Faults struct {
	// Match selects the requests faults apply to (nil: all).
	Match func(*http.Request) bool
	// Fail answers 503 Service Unavailable without passing the request on.
	Fail float64
	// Reset closes the connection without an answer (a connection reset).
	Reset float64
	// Delay holds a request for DelayBy before passing it on.
	Delay   float64
	DelayBy time.Duration
	// Seed makes the choice of requests repeatable.
	Seed int64
}

// Reads matches ranged or whole-object reads (GET of object data).
func Reads(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Query().Get("alt") == "media" || r.Header.Get("Range") != "" || !strings.Contains(r.URL.Path, "/storage/v1/"))
}

// Uploads matches object uploads (GCS resumable and simple uploads, S3 puts and parts).
func Uploads(r *http.Request) bool {
	return r.Method == http.MethodPut || r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/upload/")
}

// Server is a running server.
type Server struct {
	URL  string // http://127.0.0.1:port
	Host string // 127.0.0.1:port
	http *httptest.Server

	mu     sync.Mutex
	faults Faults
	rnd    *rand.Rand

	// Served counts the body bytes of successful GET answers; Requests counts requests.
	Served, Requests atomic.Int64
	// Failed counts the requests a fault failed or reset.
	Failed atomic.Int64
	// inFlight counts the requests being handled.
	inFlight atomic.Int64
}

// Settle waits until no request has been in flight for settle (a killed client's last
// requests may still be handled after it died: an upload whose body arrived whole is
// stored then), or until timeout; it reports whether the server settled.
func (s *Server) Settle(settle, timeout time.Duration) bool {
	idleSince := time.Now()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if s.inFlight.Load() != 0 {
			idleSince = time.Now()
		} else if time.Since(idleSince) >= settle {
			return true
		}
	}
	return false
}

// SetFaults replaces the faults injected from now on.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.rnd = f, rand.New(rand.NewSource(f.Seed))
}

// Close stops the server.
func (s *Server) Close() { s.http.Close() }

func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		s.mu.Lock()
		f := s.faults
		var fail, reset, delay bool
		if s.rnd != nil && (f.Match == nil || f.Match(r)) {
			x := s.rnd.Float64()
			fail = x < f.Fail
			reset = !fail && x < f.Fail+f.Reset
			delay = s.rnd.Float64() < f.Delay
		}
		s.mu.Unlock()
		if delay {
			time.Sleep(f.DelayBy)
		}
		switch {
		case fail:
			s.Failed.Add(1)
			io.Copy(io.Discard, r.Body)
			http.Error(w, "injected fault", http.StatusServiceUnavailable)
			return
		case reset:
			s.Failed.Add(1)
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			http.Error(w, "injected fault", http.StatusBadGateway)
			return
		}
		cw := &countingWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		if r.Method == http.MethodGet && cw.status < 300 {
			s.Served.Add(cw.n)
		}
	})
}

type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// GCS starts a GCS emulator holding the named (empty) buckets in memory. Point clients at
// it with STORAGE_EMULATOR_HOST=s.Host.
func GCS(buckets ...string) (*Server, error) { return GCSIn("", buckets...) }

// GCSIn is GCS keeping the objects in the folder root (served streaming from disk, for
// objects larger than memory should hold); "" keeps them in memory.
func GCSIn(root string, buckets ...string) (*Server, error) {
	if emulators.GCS == nil {
		return nil, errNoEmulator
	}
	return Serve(func(url string) (http.Handler, error) { return emulators.GCS(url, root, buckets) })
}

// S3 starts an S3-compatible server holding the named (empty) buckets. Point clients at it
// with AWS_ENDPOINT_URL_S3=s.URL (and any AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
func S3(buckets ...string) (*Server, error) {
	if emulators.S3 == nil {
		return nil, errNoEmulator
	}
	return Serve(func(string) (http.Handler, error) { return emulators.S3(buckets) })
}

// Serve starts a server on loopback whose requests go, through the fault and counting
// wrapper, to the handler that handler makes for the server's URL.
func Serve(handler func(url string) (http.Handler, error)) (*Server, error) {
	s := &Server{}
	var h http.Handler
	s.http = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	s.http.Start()
	s.URL, s.Host = s.http.URL, strings.TrimPrefix(s.http.URL, "http://")
	inner, err := handler(s.URL)
	if err != nil {
		s.Close()
		return nil, err
	}
	h = s.wrap(inner)
	return s, nil
}

// Env is the environment that points the clients at the servers (nil servers are
// skipped), as name=value pairs for os.Setenv or a subprocess.
func Env(gcs, s3 *Server) [][2]string {
	var env [][2]string
	if gcs != nil {
		env = append(env, [2]string{"STORAGE_EMULATOR_HOST", gcs.Host})
	}
	if s3 != nil {
		env = append(env,
			[2]string{"AWS_ENDPOINT_URL_S3", s3.URL},
			[2]string{"AWS_ACCESS_KEY_ID", "test"},
			[2]string{"AWS_SECRET_ACCESS_KEY", "test"},
			[2]string{"AWS_REGION", "us-east-1"},
			[2]string{"AWS_EC2_METADATA_DISABLED", "true"},
			[2]string{"AWS_CONFIG_FILE", "/dev/null"},
			[2]string{"AWS_SHARED_CREDENTIALS_FILE", "/dev/null"})
	}
	return env
}
