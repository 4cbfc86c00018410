package main

// Shared client setup for the commands that talk to a running cluster as a
// Kafka client (topic, produce, consume). They all use franz-go: kgo for
// records and kadm for administration, exactly as a user's program would.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const defaultBrokers = "localhost:9092"

// clientOptions holds the connection settings every client command shares.
// Values come from flags, then SEDIMENT_* environment variables (through a
// viper instance of its own, so they never mix with the broker's config), then
// defaults.
type clientOptions struct {
	v *viper.Viper
}

// addClientFlags declares --brokers, --timeout, --client-id and --log-level on
// cmd (as persistent flags, so subcommands inherit them) and binds them to
// SEDIMENT_BROKERS, SEDIMENT_TIMEOUT, SEDIMENT_CLIENT_ID and
// SEDIMENT_CLIENT_LOG_LEVEL.
func addClientFlags(cmd *cobra.Command) *clientOptions {
	v := viper.New()
	v.SetEnvPrefix("SEDIMENT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()

	fs := cmd.PersistentFlags()
	fs.StringP("brokers", "b", defaultBrokers, "comma-separated host:port list of brokers to bootstrap from (env SEDIMENT_BROKERS)")
	fs.Duration("timeout", 30*time.Second, "how long to wait for the cluster before giving up (env SEDIMENT_TIMEOUT)")
	fs.String("client-id", "sediment-cli", "client id sent to the brokers (env SEDIMENT_CLIENT_ID)")
	fs.String("log-level", "none", "client log level on stderr: none, error, warn, info, debug (env SEDIMENT_CLIENT_LOG_LEVEL)")
	names := []string{"brokers", "timeout", "client-id", "log-level"}
	names = append(names, addClientSecurityFlags(fs)...) // client_security.go
	for _, name := range names {
		// BindPFlag fails only for a nil flag, which would be a bug here.
		if err := v.BindPFlag(name, fs.Lookup(name)); err != nil {
			panic(err)
		}
	}
	// SEDIMENT_LOG_LEVEL belongs to the broker (slog, default info); the
	// client's franz-go log level has a variable of its own.
	if err := v.BindEnv("log-level", "SEDIMENT_CLIENT_LOG_LEVEL"); err != nil {
		panic(err)
	}
	return &clientOptions{v: v}
}

// seeds returns the bootstrap addresses: the comma- or space-separated list
// from --brokers or SEDIMENT_BROKERS.
func (o *clientOptions) seeds() ([]string, error) {
	return splitBrokers(o.v.GetString("brokers"))
}

func splitBrokers(s string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if !strings.Contains(f, ":") {
			f += ":9092"
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("no brokers given: set --brokers or SEDIMENT_BROKERS (host:port, comma-separated)")
	}
	return out, nil
}

// checkTimeout refuses a --timeout or SEDIMENT_TIMEOUT that is no duration
// ("3" would be 3ns to viper, and every request would time out).
func checkTimeout(v *viper.Viper) error {
	if err := checkDuration(v.Get("timeout")); err != nil {
		if os.Getenv("SEDIMENT_TIMEOUT") != "" {
			return fmt.Errorf("SEDIMENT_TIMEOUT: %w", err)
		}
		return fmt.Errorf("--timeout: %w", err)
	}
	return nil
}

func (o *clientOptions) timeout() time.Duration {
	d := o.v.GetDuration("timeout")
	if d <= 0 {
		d = 30 * time.Second
	}
	return d
}

func (o *clientOptions) logger() (kgo.Logger, error) {
	var level kgo.LogLevel
	switch strings.ToLower(o.v.GetString("log-level")) {
	case "", "none", "off":
		return nil, nil
	case "error":
		level = kgo.LogLevelError
	case "warn", "warning":
		level = kgo.LogLevelWarn
	case "info":
		level = kgo.LogLevelInfo
	case "debug":
		level = kgo.LogLevelDebug
	default:
		return nil, fmt.Errorf("unknown --log-level %q (want none, error, warn, info or debug)", o.v.GetString("log-level"))
	}
	return kgo.BasicLogger(os.Stderr, level, nil), nil
}

// newClient builds a franz-go client with the shared settings plus extra, then
// checks that at least one broker answers, so that a wrong address fails fast
// with a message that names it instead of retrying in silence.
func (o *clientOptions) newClient(ctx context.Context, extra ...kgo.Opt) (*kgo.Client, error) {
	seeds, err := o.seeds()
	if err != nil {
		return nil, err
	}
	if err := checkTimeout(o.v); err != nil {
		return nil, err
	}
	logger, err := o.logger()
	if err != nil {
		return nil, err
	}
	timeout := o.timeout()
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID(o.v.GetString("client-id")),
		kgo.DialTimeout(min(timeout, 10*time.Second)),
		kgo.RetryTimeout(timeout),
	}
	if logger != nil {
		opts = append(opts, kgo.WithLogger(logger))
	}
	sec, err := o.securityOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, sec...)
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("client options: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.Ping(pingCtx); err != nil {
		cl.Close()
		return nil, connectError(seeds, err)
	}
	return cl, nil
}

func connectError(seeds []string, err error) error {
	where := "the broker at " + seeds[0]
	if len(seeds) > 1 {
		where = "any broker of " + strings.Join(seeds, ", ")
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && (ke == kerr.SaslAuthenticationFailed || ke == kerr.UnsupportedSaslMechanism || ke == kerr.IllegalSaslState) {
		// The broker answered: the address is right, the login is not.
		return fmt.Errorf("cannot log in to %s (check --security-protocol, --sasl-mechanism and the credentials or token): %w", where, err)
	}
	return fmt.Errorf("cannot connect to %s (set --brokers or SEDIMENT_BROKERS): %w", where, err)
}

// newAdmin returns a kadm client over a fresh kgo client; closing the admin
// client closes both.
func (o *clientOptions) newAdmin(ctx context.Context) (*kadm.Client, error) {
	cl, err := o.newClient(ctx)
	if err != nil {
		return nil, err
	}
	return o.admin(cl), nil
}

// admin returns a kadm client over cl with the command's timeout.
func (o *clientOptions) admin(cl *kgo.Client) *kadm.Client {
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(min(o.timeout(), time.Hour) / time.Millisecond))
	return adm
}

// signalContext is the context every client command runs under: cancelled by
// SIGINT or SIGTERM, so that a consumer stops cleanly on Ctrl-C.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// kafkaError turns a per-item error from kadm (usually a *kerr.Error) and the
// broker's optional message into one readable error.
func kafkaError(err error, message string) error {
	if err == nil {
		return nil
	}
	var ke *kerr.Error
	if message != "" && errors.As(err, &ke) && err == error(ke) {
		// The broker's message says what happened; kerr's description of
		// the code is generic ("Number of partitions is below 1." for a
		// topic that has more partitions than asked for).
		return &brokerError{code: ke, message: message}
	}
	if message != "" && !strings.Contains(err.Error(), message) {
		return fmt.Errorf("%w (%s)", err, message)
	}
	return err
}

// brokerError is a Kafka error code with the broker's message:
// "INVALID_PARTITIONS: Topic currently has 9 partitions, …". errors.Is
// finds the code.
type brokerError struct {
	code    *kerr.Error
	message string
}

func (e *brokerError) Error() string { return e.code.Message + ": " + e.message }
func (e *brokerError) Unwrap() error { return e.code }

// unknownTopicError is the error of a command given a topic that does not
// exist: "UNKNOWN_TOPIC_OR_PARTITION: topic orders does not exist", the
// Kafka name first as for the brokers' own errors (errors.Is finds it).
func unknownTopicError(topic string) error {
	return &brokerError{code: kerr.UnknownTopicOrPartition, message: fmt.Sprintf("topic %s does not exist", topic)}
}

// isUnknownTopic reports whether err says the topic does not exist.
func isUnknownTopic(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)
}

// parseKeyValues parses repeated k=v flag values, keeping their order. The
// value may contain '='; the key may not be empty.
func parseKeyValues(flag string, items []string) ([][2]string, error) {
	out := make([][2]string, 0, len(items))
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			if flag == "" { // positional arguments
				return nil, fmt.Errorf("%q: want key=value", it)
			}
			return nil, fmt.Errorf("--%s %q: want key=value", flag, it)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// table aligns tab-separated columns like text/tabwriter (two spaces
// between columns) and drops the padding at the end of each line, which
// tabwriter leaves when a row's last cells are empty.
type table struct {
	tw  *tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

// Flush writes the aligned rows to the output.
func (t *table) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		nl := strings.HasSuffix(line, "\n")
		out.WriteString(strings.TrimRight(line, " \n"))
		if nl {
			out.WriteByte('\n')
		}
	}
	t.buf.Reset()
	_, err := t.out.Write(out.Bytes())
	return err
}
