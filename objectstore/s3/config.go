package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config describes the bucket and how to reach it. Only Bucket is required.
type Config struct {
	// Bucket is the bucket's name; it must exist.
	Bucket string
	// Prefix, if set, is put before every key (e.g. "cluster-a/"), so
	// several stores can share a bucket. Keys passed to and returned by
	// the Store never carry it.
	Prefix string

	// Endpoint is the service's URL, e.g. "http://127.0.0.1:9000" for
	// MinIO; empty means AWS S3 (resolved from Region).
	Endpoint string
	// Region defaults to the credential chain's region (AWS_REGION,
	// shared config), else "us-east-1".
	Region string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY instead of
	// BUCKET.ENDPOINT/KEY; MinIO and most S3-compatible services need it.
	PathStyle bool

	// AccessKeyID and SecretAccessKey (and SessionToken), if set, are
	// static credentials. Otherwise the SDK's standard chain is used:
	// environment (AWS_ACCESS_KEY_ID, …), shared config and credentials
	// files (Profile or AWS_PROFILE), SSO, web identity, ECS and EC2
	// instance roles.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Profile         string

	// PartSize is the size of each part of a multipart upload, and the
	// size above which a Writer switches from one PUT to a multipart
	// upload. At least 5 MiB (S3's minimum); default 8 MiB.
	PartSize int64
	// Concurrency is how many parts one Writer uploads at once
	// (default 4). A Writer holds up to Concurrency+1 parts in memory.
	Concurrency int

	// MaxAttempts is how many times a request is tried (default 10)
	// on 5xx, throttling (503 SlowDown, 429), timeouts, dropped
	// connections and checksum mismatches, with exponential backoff and
	// full jitter from BaseBackoff (default 100ms) up to MaxBackoff
	// (default 5s) between attempts.
	MaxAttempts int
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// ResponseTimeout bounds the wait for a response's headers (default
	// 30s); a timed-out attempt is retried.
	ResponseTimeout time.Duration

	// WrapTransport, if set, wraps the HTTP transport (tests inject
	// faults below the SDK's retryer with it).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Logger, if set, receives the S3 client's retries: each kind of line
	// once, then at most every 30 s with how many were left out.
	Logger *slog.Logger
}

const (
	minPartSize        = 5 << 20
	defaultPartSize    = 8 << 20
	maxParts           = 10_000
	deleteBatch        = 1000
	defaultMaxAttempts = 10
)

func (c *Config) setDefaults() error {
	if c.Bucket == "" {
		return errors.New("s3: Config.Bucket is empty")
	}
	if c.PartSize == 0 {
		c.PartSize = defaultPartSize
	}
	if c.PartSize < minPartSize {
		return fmt.Errorf("s3: Config.PartSize %d is below S3's minimum of 5 MiB", c.PartSize)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.ResponseTimeout <= 0 {
		c.ResponseTimeout = 30 * time.Second
	}
	return nil
}

// retryableCodes are error codes retried beyond the SDK's defaults: a
// checksum mismatch means the bytes were corrupted on the way (the body is
// sent again), and a conditional-write conflict asks for a retry.
var retryableCodes = map[string]struct{}{
	"BadDigest":                   {},
	"InvalidDigest":               {},
	"XAmzContentChecksumMismatch": {},
	"XAmzContentSHA256Mismatch":   {},
	"ConditionalRequestConflict":  {},
	"InternalError":               {},
	"ServiceUnavailable":          {},
	"SlowDownRead":                {},
	"SlowDownWrite":               {},
	"XMinioServerNotInitialized":  {},
}

// jitterBackoff is exponential backoff with full jitter: attempt i waits a
// uniformly random time in [0, min(max, base·2^i)].
type jitterBackoff struct{ base, max time.Duration }

func (j jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	ceiling := j.max
	if attempt < 30 {
		if d := j.base << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling + 1), nil
}

func (c *Config) newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = c.MaxAttempts
		o.MaxBackoff = c.MaxBackoff
		o.Backoff = jitterBackoff{base: c.BaseBackoff, max: c.MaxBackoff}
		// A long outage must not drain a token bucket and turn every
		// later transient error into a hard failure.
		o.RateLimiter = ratelimit.None
		o.Retryables = append(append([]retry.IsErrorRetryable{}, retry.DefaultRetryables...),
			retry.RetryableErrorCode{Codes: retryableCodes})
	})
}

func (c *Config) newClient(ctx context.Context) (*s3.Client, *http.Client, error) {
	var loadOpts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(c.Region))
	}
	if c.Profile != "" {
		loadOpts = append(loadOpts, awsconfig.WithSharedConfigProfile(c.Profile))
	}
	if c.AccessKeyID != "" || c.SecretAccessKey != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)))
	}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.ResponseTimeout,
		ExpectContinueTimeout: time.Second,
		// Objects are compressed segments; gzip would only cost CPU
		// and break ranged reads' lengths.
		DisableCompression: true,
	}
	if bundle := os.Getenv("AWS_CA_BUNDLE"); bundle != "" {
		pem, err := os.ReadFile(bundle)
		if err != nil {
			return nil, nil, fmt.Errorf("s3: AWS_CA_BUNDLE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("s3: AWS_CA_BUNDLE %s holds no certificate", bundle)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = transport
	if c.WrapTransport != nil {
		rt = c.WrapTransport(rt)
	}
	httpClient := &http.Client{Transport: rt}
	loadOpts = append(loadOpts, awsconfig.WithRetryer(c.newRetryer))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("s3: loading AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.HTTPClient = httpClient
		if c.Logger != nil {
			o.Logger = newSDKLogger(c.Logger, time.Now)
			o.ClientLogMode = aws.LogRetries
		}
		// Uploads carry a CRC32C the server checks (set per request);
		// ranged reads cannot be checked against a whole-object sum.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return client, httpClient, nil
}
