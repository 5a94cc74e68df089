package bucket

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/encoding/httpbinding"
)

// S3 (and S3-compatible stores) through the S3 REST API
// (https://docs.aws.amazon.com/AmazonS3/latest/API/) over net/http: the same calls as for
// GCS (gcs.go) and the multipart uploads of s3put.go. Requests are signed by the AWS SDK's
// Signature Version 4 signer with credentials from the SDK's default chain
// (config.LoadDefaultConfig: the environment, AWS_PROFILE and the shared files with their
// SSO, assume-role, web-identity and process profiles, container and instance roles). The
// SDK's S3 client would add 9 MB to the binary for these nine calls: the command's
// templates make the linker keep every method of every type in an interface, and the S3
// client has hundreds (BENCHMARKS.md, "Footprint").

// emptySHA256 is the SHA-256 of no bytes: the payload hash of a request without a body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

type s3API struct {
	c      *http.Client
	creds  aws.CredentialsProvider
	signer *v4.Signer
	region string
	base   *url.URL // the endpoint: scheme://host[/path]
	path   bool     // the bucket goes in the path (custom endpoints, names with dots)
	bucket string
}

// newS3 is the client of an S3 bucket: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (or the
// profile's endpoint_url) names an S3-compatible endpoint, addressed path-style; otherwise
// the bucket's virtual host in the configured region, us-east-1 when none is.
func newS3(ctx context.Context, bucket string) (*s3API, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	a := &s3API{
		c:      &http.Client{Transport: newTransport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		creds:  cfg.Credentials,
		signer: v4.NewSigner(),
		region: cfg.Region,
		bucket: bucket,
	}
	if a.region == "" {
		a.region = "us-east-1"
	}
	endpoint := os.Getenv("AWS_ENDPOINT_URL_S3")
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	if endpoint == "" && cfg.BaseEndpoint != nil {
		endpoint = *cfg.BaseEndpoint
	}
	switch {
	case endpoint != "":
		a.path = true // S3-compatible servers (MinIO, emulators) are addressed by path
	case strings.Contains(bucket, "."):
		// A name with dots is not a host name the service's certificate covers.
		endpoint, a.path = "https://s3."+a.region+"."+awsDomain(a.region), true
	default:
		endpoint = "https://" + bucket + ".s3." + a.region + "." + awsDomain(a.region)
	}
	if a.base, err = url.Parse(strings.TrimSuffix(endpoint, "/")); err != nil || a.base.Host == "" {
		return nil, fmt.Errorf("the S3 endpoint %q is not a URL", endpoint)
	}
	return a, nil
}

// awsDomain is the domain of the partition of region.
func awsDomain(region string) string {
	if strings.HasPrefix(region, "cn-") {
		return "amazonaws.com.cn"
	}
	return "amazonaws.com"
}

// url is the URL of the object key ("" for the bucket) with the query q.
func (a *s3API) url(key string, q url.Values) string {
	p := a.base.EscapedPath()
	if a.path {
		p += "/" + httpbinding.EscapePath(a.bucket, true)
	}
	if key != "" || !a.path {
		p += "/" + httpbinding.EscapePath(key, false)
	}
	u := a.base.Scheme + "://" + a.base.Host + p
	if len(q) > 0 {
		u += "?" + strings.ReplaceAll(q.Encode(), "+", "%20")
	}
	return u
}

// do signs and sends a request with the given body (nil for none; a body's payload is
// unsigned: its checksum header, which the service checks, covers it) and returns its
// answer when its status is 2xx, else an *HTTPError with the service's code and message.
func (a *s3API) do(ctx context.Context, method, u string, body []byte, hdr http.Header) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	hash := emptySHA256
	if body != nil {
		req.ContentLength = int64(len(body))
		hash = "UNSIGNED-PAYLOAD"
	}
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds, err := a.creds.Retrieve(ctx)
	if err != nil {
		return nil, credentialsError{err}
	}
	if err := a.signer.SignHTTP(ctx, creds, req, hash, "s3", a.region, time.Now(), func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true // the path is escaped once, as S3 expects
	}); err != nil {
		return nil, err
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, s3Error(resp.StatusCode, io.LimitReader(resp.Body, 16<<10))
}

// s3Error is the error an S3 answer of status reports in its body (<Error><Code>…).
func s3Error(status int, body io.Reader) error {
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
		Region  string `xml:"Region"`
	}
	xml.NewDecoder(body).Decode(&e)
	msg := strings.TrimSpace(e.Code + ": " + e.Message)
	if e.Region != "" {
		msg += " (the bucket is in " + e.Region + ": set AWS_REGION)"
	}
	return &HTTPError{Status: status, Message: strings.Trim(msg, ": ")}
}

func (a *s3API) stat(ctx context.Context, key string) (Attributes, error) {
	resp, err := a.do(ctx, http.MethodHead, a.url(key, nil), nil, nil)
	if err != nil {
		return Attributes{}, err
	}
	resp.Body.Close()
	attrs := Attributes{Size: resp.ContentLength, Metadata: map[string]string{}}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil {
		attrs.Size = n
	}
	for k, v := range resp.Header {
		if m, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-meta-"); ok && len(v) > 0 {
			attrs.Metadata[m] = v[0]
		}
	}
	return attrs, nil
}

func (a *s3API) readRange(ctx context.Context, key string, p []byte, off int64) error {
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)}}
	resp, err := a.do(ctx, http.MethodGet, a.url(key, nil), nil, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent && off != 0 {
		return errRangeIgnored{resp.StatusCode}
	}
	_, err = io.ReadFull(resp.Body, p)
	return err
}

func (a *s3API) list(ctx context.Context, prefix, delim, token string) ([]Entry, string, error) {
	q := url.Values{"list-type": {"2"}, "prefix": {prefix}, "max-keys": {"1000"}, "encoding-type": {"url"}}
	if delim != "" {
		q.Set("delimiter", delim)
	}
	if token != "" {
		q.Set("continuation-token", token)
	}
	resp, err := a.do(ctx, http.MethodGet, a.url("", q), nil, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var res struct {
		Contents []struct {
			Key  string `xml:"Key"`
			Size int64  `xml:"Size"`
		} `xml:"Contents"`
		CommonPrefixes []struct {
			Prefix string `xml:"Prefix"`
		} `xml:"CommonPrefixes"`
		IsTruncated           bool   `xml:"IsTruncated"`
		NextContinuationToken string `xml:"NextContinuationToken"`
		EncodingType          string `xml:"EncodingType"`
	}
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&res); err != nil {
		return nil, "", fmt.Errorf("the listing: %w", err)
	}
	// Keys come URL-encoded when the service says so (XML cannot hold every byte a key
	// may have).
	decode := func(s string) (string, error) {
		if res.EncodingType != "url" {
			return s, nil
		}
		return url.QueryUnescape(s)
	}
	page := make([]Entry, 0, len(res.Contents)+len(res.CommonPrefixes))
	for _, o := range res.Contents {
		k, err := decode(o.Key)
		if err != nil {
			return nil, "", fmt.Errorf("the listing's key %q: %w", o.Key, err)
		}
		page = append(page, Entry{Key: k, Size: o.Size})
	}
	for _, p := range res.CommonPrefixes {
		k, err := decode(p.Prefix)
		if err != nil {
			return nil, "", fmt.Errorf("the listing's prefix %q: %w", p.Prefix, err)
		}
		page = append(page, Entry{Key: k, IsDir: true})
	}
	sortEntries(page)
	next := ""
	if res.IsTruncated {
		next = res.NextContinuationToken
	}
	return page, next, nil
}

func (a *s3API) remove(ctx context.Context, key string) error {
	resp, err := a.do(ctx, http.MethodDelete, a.url(key, nil), nil, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (a *s3API) put(ctx context.Context, key string, data []byte, opts PutOptions) error {
	return a.putObject(ctx, key, data, opts)
}

func (a *s3API) closeIdle() { a.c.CloseIdleConnections() }

func (a *s3API) writer(ctx context.Context, key string, opts PutOptions) Writer {
	return newS3Upload(ctx, a, key, opts)
}
