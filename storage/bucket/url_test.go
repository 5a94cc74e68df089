package bucket

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{"gs://ckpt-runs/llama/step-1000/", "gs://ckpt-runs/llama/step-1000", ""},
		{"s3://bucket", "s3://bucket", ""},
		{"s3://bucket/a.pt", "s3://bucket/a.pt", ""},
		{"gs://b/x", "", "not a valid bucket name"},
		{"gs://user:secret@bucket/x", "", "no user information"},
		{"gs://bucket/x?token=abc", "", "no query"},
		{"gs://bucket//x", "", "empty"},
		{"gs://bucket/a/../b", "", ".."},
		{"http://bucket/x", "", "not a gs:// or s3://"},
		{"gs://", "", "no bucket"},
	} {
		l, err := Parse(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error saying %q", c.in, err, c.err)
		case c.err == "" && (err != nil || l.String() != c.want):
			t.Errorf("%q: %v %v, want %s", c.in, l, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error repeats the credentials: %v", c.in, err)
		}
	}
}

// FuzzParse: an accepted URL round-trips, and a refused one's error never repeats what
// follows the bucket name's user information or a query (where secrets would be).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"gs://bucket/a/b", "s3://bucket", "gs://u:p@bucket/x", "gs://bucket/x?sig=1", "s3://a.b-c_d/ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(s)
		if err != nil {
			if i := strings.IndexAny(s, "@?#"); i >= 0 && len(s)-i > 8 && strings.Contains(err.Error(), s[i:]) {
				t.Fatalf("%q: error repeats %q: %v", s, s[i:], err)
			}
			return
		}
		again, err := Parse(l.String())
		if err != nil || again != l {
			t.Fatalf("%q → %v → %v (%v)", s, l, again, err)
		}
		if strings.Contains(l.Key, "//") || strings.HasPrefix(l.Key, "/") {
			t.Fatalf("%q: key %q", s, l.Key)
		}
	})
}
