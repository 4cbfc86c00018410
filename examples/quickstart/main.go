// Command quickstart is the README's franz-go session: it produces three keyed
// records to the topic "quickstart" and reads the topic back from its start.
// Run it against `make run`: go run ./examples/quickstart
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "a broker to bootstrap from")
	flag.Parse()

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(*brokers),
		kgo.AllowAutoTopicCreation(), // the broker creates "quickstart" on first use
		kgo.ConsumeTopics("quickstart"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Produce: acks=all and idempotent by default; the key picks the
	// partition with murmur2, as Kafka's Java client does.
	for _, name := range []string{"ada", "grace", "edsger"} {
		r := &kgo.Record{Topic: "quickstart", Key: []byte(name), Value: []byte("hello, " + name)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	// Consume: the first three records of the topic.
	for seen := 0; seen < 3; {
		fetches := cl.PollFetches(ctx)
		for _, e := range fetches.Errors() {
			log.Fatalf("fetch %s[%d]: %v", e.Topic, e.Partition, e.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if seen < 3 {
				fmt.Printf("%s[%d]@%d %s: %s\n", r.Topic, r.Partition, r.Offset, r.Key, r.Value)
			}
			seen++
		})
	}
}
