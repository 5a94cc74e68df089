package bucket

import (
	"fmt"
	"strings"
)

// Location is an object or prefix in a bucket: gs://Bucket/Key or s3://Bucket/Key.
type Location struct {
	Scheme string // "gs" or "s3"
	Bucket string
	Key    string // no leading slash; "" is the bucket's root
}

// String is the location as a URL.
func (l Location) String() string {
	if l.Key == "" {
		return l.Scheme + "://" + l.Bucket
	}
	return l.Scheme + "://" + l.Bucket + "/" + l.Key
}

// Parse splits a gs:// or s3:// URL into its bucket and key. A trailing slash is dropped
// (a prefix and a folder are the same thing here). URLs with a query, a fragment, user
// information or empty path segments are refused: endpoints and credentials come from the
// environment, never from the URL (so a URL printed in a message or a manifest carries no
// secret).
func Parse(u string) (Location, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || scheme != "gs" && scheme != "s3" {
		return Location{}, fmt.Errorf("%q: not a gs:// or s3:// URL", redact(u))
	}
	if strings.ContainsAny(rest, "?#") {
		return Location{}, fmt.Errorf("%s://…: a bucket URL takes no query or fragment (endpoints and credentials come from the environment)", scheme)
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%s://: no bucket name", scheme)
	}
	if strings.Contains(bucket, "@") {
		return Location{}, fmt.Errorf("%s://…: a bucket URL takes no user information (credentials come from the environment)", scheme)
	}
	if !validBucket(bucket) {
		return Location{}, fmt.Errorf("%s://%s: not a valid bucket name", scheme, bucket)
	}
	key = strings.TrimSuffix(key, "/")
	if key != "" {
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return Location{}, fmt.Errorf("%s://%s/%s: empty, . or .. path segment", scheme, bucket, key)
			}
		}
	}
	return Location{Scheme: scheme, Bucket: bucket, Key: key}, nil
}

// validBucket accepts the characters GCS and S3 allow in bucket names (lower-case
// letters, digits, '-', '_', '.'), 3 to 222 of them.
func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 222 {
		return false
	}
	for _, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Join is the location of name (slash-separated) under l.
func (l Location) Join(name string) Location {
	if l.Key == "" {
		l.Key = name
	} else {
		l.Key += "/" + name
	}
	return l
}

// redact cuts u before any user information, query or fragment, where secrets would be.
func redact(u string) string {
	if i := strings.IndexAny(u, "@?#"); i >= 0 {
		return u[:i] + "…"
	}
	return u
}
