package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/event"
)

func publishCommand(ctx context.Context, args []string, e env) error {
	var (
		lf       logFlags
		kf       kafkaFlags
		topic    string
		file     string
		maxBytes int
		parts    int
		create   bool
	)
	fs := newFlagSet("publish", "publish [flags] (reads JSON lines from --file or standard input)", e)
	lf.register(fs)
	kf.register(fs)
	fs.StringVar(&topic, "topic", "documents", "topic to publish to")
	fs.StringVar(&file, "file", "-", "file of documents, one JSON object a line; - is standard input")
	fs.IntVar(&maxBytes, "max-record-bytes", event.DefaultLimits().MaxRecordBytes, "longest line accepted")
	fs.BoolVar(&create, "create-topic", false, "create --topic when it does not exist; without it a missing topic (a misspelt name, say) is an error")
	fs.IntVar(&parts, "topic-partitions", 3, "with --create-topic: partitions of the topic it creates")
	fs.Var(renamedFlag{now: "--topic-partitions (PROJECTOR_TOPIC_PARTITIONS)",
		why: "replay's --partitions, the partitions it resets, reads PROJECTOR_PARTITIONS"},
		"partitions", "renamed --topic-partitions, so that it no longer shares PROJECTOR_PARTITIONS with replay's --partitions")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	log, err := lf.logger(e)
	if err != nil {
		return err
	}
	in := e.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	opts, err := kf.opts(log)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.ClientID("projector-publish"))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := ensureTopic(ctx, cl, log, topic, create, parts); err != nil {
		return err
	}
	n, err := publish(ctx, cl, in, maxBytes)
	fmt.Fprintf(e.stdout, "published %d records to %s\n", n, topic)
	if err != nil {
		log.Debug("publish stopped", zap.Error(err))
	}
	return err
}

// publish produces every line of in as one record keyed by its
// document_key, and returns how many the broker acknowledged. It stops at
// the first line that is not a JSON object with a string document_key:
// such a line has no key to keep its document's events in order.
func publish(ctx context.Context, cl *kgo.Client, in io.Reader, maxBytes int) (int, error) {
	var (
		mu      sync.Mutex
		acked   int
		failure error
	)
	done := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && failure == nil {
			failure = err
		}
		if err == nil {
			acked++
		}
	}
	r := bufio.NewReaderSize(in, 64<<10)
	var lineErr error
	for line := 1; ; line++ {
		raw, err := readLine(r, maxBytes)
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			lineErr = fmt.Errorf("line %d: %w", line, err)
			break
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		var head struct {
			DocumentKey *string `json:"document_key"`
		}
		if json.Unmarshal(raw, &head) != nil || head.DocumentKey == nil {
			lineErr = fmt.Errorf("line %d: not a JSON object with a string document_key", line)
			break
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(*head.DocumentKey), Value: raw}, done)
	}
	if err := cl.Flush(ctx); err != nil && lineErr == nil {
		lineErr = fmt.Errorf("flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failure != nil {
		return acked, fmt.Errorf("produce: %w", failure)
	}
	return acked, lineErr
}

// readLine reads one line without its newline, refusing lines over max.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := r.ReadLine()
		line = append(line, part...)
		if len(line) > max {
			return nil, fmt.Errorf("longer than --max-record-bytes (%d)", max)
		}
		if err != nil || !isPrefix {
			return line, err
		}
	}
}

// ensureTopic checks that topic exists; with create it creates a missing
// one with partitions. Creating only when asked keeps a misspelt --topic
// from making a topic that nothing reads.
func ensureTopic(ctx context.Context, cl *kgo.Client, log *zap.Logger, topic string, create bool, partitions int) error {
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("list Kafka topics: %w", err)
	}
	if d, ok := details[topic]; ok && d.Err == nil {
		return nil
	}
	if !create {
		return fmt.Errorf("topic %s does not exist: check --topic, create the topic, or pass --create-topic", topic)
	}
	if partitions <= 0 {
		return usageError(fmt.Errorf("--topic-partitions %d: want at least 1", partitions))
	}
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	log.Info("created topic", zap.String("topic", topic), zap.Int("partitions", partitions))
	return nil
}
