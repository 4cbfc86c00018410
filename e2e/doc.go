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
//	kcat_test.go     kcat -L, keyed produce and consume, partitioner agreement
//	cli_test.go      sediment topic/produce/consume end to end
//	restart_test.go  broker restart mid-stream without losing acknowledged
//	                 records
//
// Set SEDIMENT_E2E_VERBOSE=1 to stream broker logs to stderr while tests run.
// With -short the package is skipped (it starts processes and takes a while).
package e2e
