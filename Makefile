# Sediment: a Kafka-compatible log service with tiered storage.
GO        ?= go
TAGS      ?=
PKGS      ?= ./...
FUZZTIME  ?= 5s
TIMEOUT   ?= 25m
GOBIN     := $(shell $(GO) env GOPATH)/bin
TESTLOG   ?= $(or $(TMPDIR),/tmp)/sediment-make-test.log
SHELL     := /bin/bash

.PHONY: all build run cluster chaos compaction-kills pipeline compat-franz compat-kafkago compat-sarama compat-confluent-go compat-librdkafka compat-kafkajs tier-e2e test testrace test-short bench lint fuzz fuzz-short generate stress clean

all: build

build:
	$(GO) build -o bin/sediment ./cmd/sediment

## run: one broker on localhost:9092, data under ./data, the bucket a local folder.
run: build
	./bin/sediment broker

## cluster: three brokers on localhost:9092-9094 with a three-voter metadata quorum, data under ./data/cluster; Ctrl-C stops them.
cluster: build
	./scripts/cluster.sh

## chaos: the long fault runs under an idempotent acks=all producer: SIGKILLs of partition leaders, SIGSTOP pauses and network partitions (toxiproxy); then replica moves (AlterPartitionReassignments) with a broker SIGKILLed during most of them.
chaos:
	SEDIMENT_CHAOS_KILLS=$${SEDIMENT_CHAOS_KILLS:-12} SEDIMENT_CHAOS_MOVES=$${SEDIMENT_CHAOS_MOVES:-16} $(GO) test -race -count=1 -timeout 45m -run 'TestReplicationLeaderKills|TestReassignmentChaos' -v ./e2e/

## compaction-kills: SIGKILL a broker during compaction 20 times (make test runs 5); every key's latest value is its last acknowledged write.
compaction-kills:
	SEDIMENT_COMPACTION_KILLS=$${SEDIMENT_COMPACTION_KILLS:-20} $(GO) test -race -count=1 -timeout 30m -run 'TestKillDuringCompaction' -v ./e2e/

## pipeline: the exactly-once pipeline under SIGKILLs (two pipeline processes, three pipeline and three broker kills) with 200,000 records.
pipeline:
	SEDIMENT_E2E_PIPELINE_RECORDS=$${SEDIMENT_E2E_PIPELINE_RECORDS:-200000} $(GO) test -race -count=1 -timeout 30m -run 'TestTxnPipelineSIGKILL' -v ./e2e/

## tier-e2e: a longer tiered-storage run on MinIO: 256 MB through 1 MiB segments to the bucket and back (make test runs it with 100 MB).
tier-e2e:
	SEDIMENT_TIER_E2E_MB=$${SEDIMENT_TIER_E2E_MB:-256} $(GO) test -race -count=1 -timeout 20m -run 'TestTieringMinIO' -v ./e2e/

## compat-franz: franz-go's own kgo test suite (go.mod's version, from the module cache) against brokers of this tree; BROKERS=3 for a replicated cluster (docs/compatibility.md).
compat-franz:
	GO=$(GO) ./scripts/compat-franz.sh

## compat-kafkago: segmentio/kafka-go's own package tests (go.mod's version, from the module cache) against a broker of this tree on localhost:9092, which must be free (docs/compatibility.md).
compat-kafkago:
	GO=$(GO) ./scripts/compat-kafkago.sh

## compat-librdkafka: librdkafka's own test suite (tests/0xxx; a checkout in LIBRDKAFKA_DIR, built if needed) against three brokers of this tree (docs/compatibility.md).
compat-librdkafka:
	GO=$(GO) ./scripts/compat-librdkafka.sh

## compat-kafkajs: kafkajs's own test suite (jest; a checkout in KAFKAJS_DIR, npm installs its devDependencies if needed) against three brokers of this tree on 127.0.0.1:9092-9100, which must be free (docs/compatibility.md).
compat-kafkajs:
	GO=$(GO) ./scripts/compat-kafkajs.sh

## compat-sarama: IBM/sarama's own functional tests (go.mod's version, from the module cache) against five brokers of this tree, each behind toxiproxy on 127.0.0.1:29091-29095 (docs/compatibility.md).
compat-sarama:
	GO=$(GO) ./scripts/compat-sarama.sh

## compat-confluent-go: confluent-kafka-go's own tests (CONFLUENT_GO_VERSION, v2.11.1, fetched into a scratch module; librdkafka bundled, cgo), then librdkafka's KIP-848 consumer, against a broker of this tree (docs/compatibility.md).
compat-confluent-go:
	GO=$(GO) ./scripts/compat-confluent-go.sh

## test: every test, with the race detector, then a short run of every fuzz target.
test: lint-vet
	@set -o pipefail; $(GO) test -race -count=1 -timeout $(TIMEOUT) $(if $(TAGS),-tags $(TAGS)) $(PKGS) 2>&1 | tee $(TESTLOG) \
		|| { rc=$$?; ./scripts/test-summary.sh $(TESTLOG); exit $$rc; }
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

testrace: test

## test-short: without the race detector, for a quick loop.
test-short:
	$(GO) test -count=1 -short $(PKGS)

## bench: the benchmarks, each printing its figure beside the machine's own limit.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -timeout 60m $(PKGS)

lint-vet:
	$(GO) vet $(PKGS)

## lint: go vet, staticcheck, and the import-arrow lint test.
lint: lint-vet
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(GOBIN)/staticcheck $(PKGS)
	$(GO) test -count=1 ./internal/lint/

## fuzz: a longer run of every fuzz target (FUZZTIME each).
fuzz:
	FUZZTIME=$(if $(filter 5s,$(FUZZTIME)),60s,$(FUZZTIME)) ./scripts/fuzz.sh

## stress: long race-detector loops of the storage and consensus packages.
stress:
	$(GO) test -race -count=20 -timeout 60m ./hotlog/... ./metadata/...

generate:
	$(GO) generate $(PKGS)
	git diff --exit-code

clean:
	rm -rf bin
