// Package bucket reads and writes checkpoints in Google Cloud Storage (gs://bucket/prefix)
// and Amazon S3 or S3-compatible stores (s3://bucket/prefix), through each service's REST
// API over net/http (client.go: one client layer per cloud, every call taking a context).
// Importing it registers both schemes with package storage, after which formats.Open,
// scan.Scan, convert.Run and verify.Check take such URLs wherever they take paths:
//
//	import _ "github.com/ckpt-dev/ckpt/storage/bucket"
//
// # Credentials and endpoints
//
// Credentials come from the standard places and never from the URL (Parse refuses user
// information, queries and fragments, so a URL in a message or a manifest holds no
// secret): GCS uses Application Default Credentials through golang.org/x/oauth2/google
// (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, the metadata
// server); S3 requests are signed by the AWS SDK's SigV4 signer with the SDK's default
// chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files,
// instance and container roles) and AWS_REGION (default us-east-1). Endpoints for emulators
// and S3-compatible stores come from STORAGE_EMULATOR_HOST=host:port (GCS, no credentials)
// and AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (S3, addressed path-style).
//
// # Reading
//
// An object is a storage.File read with ranged GETs of exactly the bytes a reader asks for:
// opening a checkpoint reads its headers, pickles and metadata; a tensor's bytes are
// fetched when the tensor is read, so --select and --drop read less and a host of a
// multi-host conversion reads only its shards. Reads larger than BlockSize are split into
// blocks fetched in parallel. Each storage reads through a window of the object on its
// own range (statedict.Windower): a reader streaming through it gets the bytes ahead
// prefetched — twice as far ahead as it has read, from 64 KiB up to Ahead blocks — but never
// past the range's end, so reading one tensor never fetches the next one's bytes unless
// the writer asks for them (statedict.Prefetcher: a conversion asks for the next tensor's
// first block while it writes the current one). At most
// Parallel requests are in flight and at most a few streams hold prefetched bytes: memory
// is bounded whatever the object's or checkpoint's size. Scanning a torch.save zip (ckpt
// scan, inspect's safety scan) reads its directory, local headers and pickles in ranges,
// not the object. Transient failures (5xx, 429, resets, bodies cut short) are retried with
// backoff, each request tried at most Retries times: one layer of retries (retry, and a
// resumable upload's chunks, which count the same), so a persistent failure is reported
// within seconds.
//
// # Writing
//
// An output (storage.Output) streams each file to its final name: a GCS resumable upload or
// an S3 multipart upload, which the service makes visible only when it is finalized, so no
// object is ever seen half-written. Uploads fill reused buffers outside the Go heap: a GCS
// upload's chunks (gcs.go) are sent one at a time while the next one fills; an S3
// upload's parts (s3put.go), at most UploadParallel in flight, each carry their CRC32 for
// the service to check. An object smaller than a chunk or a part is sent in one request,
// with its checksum. After each upload the stored
// size, and the CRC32C of a GCS object (the composite CRC32 of an S3 one, when reported),
// are compared with what was sent. The output writes a
// PartialMarker object first and removes it last; its manifest is uploaded after every
// other file, so a manifest means a complete output. Abort (an error, a cancelled context,
// SIGINT/SIGTERM in the CLI) cancels the uploads in flight, which the services discard,
// and removes the objects this output completed; a manifest was never written, so nothing
// left can pass `ckpt check`.
//
// A folder output that must survive SIGKILL — which runs no cleanup — to be resumed is
// written as host 0 of 1 of a shared output (JoinOutput; hosts.go, "One host"): it is
// journaled as it goes, its run is the conversion's key rather than a random one, and
// storage.SharedOptions.Resume keeps what a killed run of the same conversion finished.
//
// A destination prefix holding objects is refused unless Force is set and ckpt wrote every
// one of them: the ckpt manifest there lists them all, or a PartialMarker names a run and
// every object beside it carries that run in its metadata (RunMetadata) — an unfinished
// ckpt output. The earlier output is then removed, manifest first. Objects ckpt did not
// write are never deleted or overwritten, a stale marker beside them notwithstanding.
package bucket
