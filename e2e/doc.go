// Package e2e holds Sediment's process-level end-to-end tests: they build the
// sediment binary once, start real broker processes on free loopback ports
// with their own data directories, and drive them with real clients (franz-go,
// kcat from Debian, and the sediment command line itself), including broker
// restarts by SIGTERM and by SIGKILL.
//
// The package has no non-test code; everything lives in its _test.go files:
//
//	harness_test.go  TestMain (builds the binary), Broker (start, wait for
//	                 ApiVersions, stop with SIGTERM then SIGKILL, kill,
//	                 restart, log capture), helpers to run sediment and kcat
//	kcat_test.go     kcat -L, keyed produce and consume, partitioner agreement,
//	                 codecs, headers, librdkafka's idempotent producer
//	cli_test.go      sediment topic/produce/consume end to end
//	restart_test.go  broker restarts mid-stream (SIGTERM, SIGKILL) without
//	                 losing or duplicating acknowledged records
//	readme_test.go   the README's franz-go program is examples/quickstart and
//	                 works
//	compat_*_test.go TestCompat: sarama, kafka-go, kafkajs (e2e/kafkajs, npm
//	                 ci) and kcat groups/-Q against one shared broker; the
//	                 results table is docs/compatibility.md
//
// Using the harness in a new test:
//
//	b := StartBroker(t, BrokerOptions{})        // free ports, fresh data dir, ready to serve
//	b.CreateTopic(t, "t", 3, nil)               // through kadm
//	cl := b.Client(t, kgo.DefaultProduceTopic("t"))
//	out := b.sediment(t, stdin, "consume", "t", "--exit").Stdout
//	out = b.kcat(t, "", "-L").Stdout
//	b.Restart(false)                            // SIGKILL, then start over the same data and ports
//	b.Stop()                                    // SIGTERM; SIGKILL (and a test error) after 30s
//
// A broker counts as ready when it answers ApiVersions (listing Metadata)
// and a Metadata request that names it. Its stdout and stderr are kept and
// printed with the test's log when the test fails; a race report in them
// (the broker is built with -race when the tests are) fails the test. The
// broker's command line lives in one place, Broker.brokerArgs.
//
// Set SEDIMENT_E2E_VERBOSE=1 to stream broker logs to stderr while tests run.
// With -short the package is skipped (it starts processes and takes a while).
package e2e
