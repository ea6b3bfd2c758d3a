package kafkaclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// Fetch responses are decoded here, not by kafka-go. kafka-go decodes a
// response's records one varint at a time through several layers of
// readers and copies every key and value: about 0.6 µs a record, more than
// kcat spends to read and print one, and most of what a flood of foreign
// messages on a canary topic costs the prober. Its decoder leaves a field
// of type []byte as the bytes the broker sent, so fetchResponse, kafka-go's
// fetch.Response with the records as []byte, is registered as the answer to
// every Fetch request, and the record batches are read from those bytes in
// place (records.go).
//
// The registration is process-wide: every fetch on any kafka-go Transport
// of a program that links this package is answered with a *fetchResponse.
// kafka.Client.Fetch, which asserts kafka-go's type, must not be used (it
// would panic); fetchOne is its replacement. kafka.Reader and kafka.Conn
// encode their fetches themselves and are not affected.
func init() {
	protocol.Register(&fetch.Request{}, &fetchResponse{})
}

// fetchResponse is the Fetch response up to v11, field for field as
// kafka-go's fetch.Response, with each partition's records left as sent.
type fetchResponse struct {
	ThrottleTimeMs int32                `kafka:"min=v1,max=v11"`
	ErrorCode      int16                `kafka:"min=v7,max=v11"`
	SessionID      int32                `kafka:"min=v7,max=v11"`
	Topics         []fetchResponseTopic `kafka:"min=v0,max=v11"`
}

func (*fetchResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }

type fetchResponseTopic struct {
	Topic      string                   `kafka:"min=v0,max=v11"`
	Partitions []fetchResponsePartition `kafka:"min=v0,max=v11"`
}

type fetchResponsePartition struct {
	Partition            int32                       `kafka:"min=v0,max=v11"`
	ErrorCode            int16                       `kafka:"min=v0,max=v11"`
	HighWatermark        int64                       `kafka:"min=v0,max=v11"`
	LastStableOffset     int64                       `kafka:"min=v4,max=v11"`
	LogStartOffset       int64                       `kafka:"min=v5,max=v11"`
	AbortedTransactions  []fetch.ResponseTransaction `kafka:"min=v4,max=v11"`
	PreferredReadReplica int32                       `kafka:"min=v11,max=v11"`
	// Records are the partition's record batches as the broker stores
	// them; the last may be cut short by the fetch's size limit.
	Records []byte `kafka:"min=v0,max=v11"`
}

// The layout of a record batch (format v2, "magic" 2). Older message sets
// (v0, v1) share the first three fields and the position of the magic
// byte; their offset field is the last offset of the entry.
const (
	batchLengthAt     = 8  // int32: the bytes after this field
	batchHeaderLen    = 12 // base offset and length
	batchMagicAt      = 16 // int8
	batchCRCAt        = 17 // uint32, CRC-32C of everything from batchAttributesAt on
	batchAttributesAt = 21 // int16
	batchLastDeltaAt  = 23 // int32: the last offset minus the base offset
	batchTimestampAt  = 27 // int64: the first record's timestamp, ms
	batchMaxTimeAt    = 35 // int64: the largest timestamp, or the broker's append time (attrLogAppendTime), ms
	batchCountAt      = 57 // int32
	batchRecordsAt    = 61

	attrCompression   = 0x07
	attrLogAppendTime = 0x08 // the timestamp type: set when the broker stamped the batch
	attrControl       = 0x20
)

// TimestampType says whose clock a record's timestamp is on.
type TimestampType int8

const (
	// CreateTime: the producer's timestamp (a relay's send time,
	// Debezium's processing time), on the producer's clock.
	CreateTime TimestampType = iota
	// LogAppendTime: the broker's append time, on the broker's clock
	// (a topic with message.timestamp.type=LogAppendTime).
	LogAppendTime
)

func (t TimestampType) String() string {
	if t == LogAppendTime {
		return "LogAppendTime"
	}
	return "CreateTime"
}

// Message is a record as the Fetcher reads it: kafka-go's Message, whose
// Time is the record's timestamp as Kafka's own consumer reports it (the
// broker's append time in a LogAppendTime batch, else the producer's
// CreateTime), and whose clock that is.
//
// kafka-go's decoders take the first timestamp plus the record's delta
// whatever the batch's timestamp type: on a LogAppendTime topic that is the
// producer's time, and the broker's append time, which the broker writes
// only into the batch's max timestamp and attribute bit, is lost.
type Message struct {
	kafka.Message
	TimestampType TimestampType
	// Received is when the fetch that brought it was answered, on the
	// Reader's clock (ReadOptions.Now): its consume stamp, taken as the
	// answer is read, before its records are decoded and handed to the
	// Reader's goroutine, which may be busy with other partitions or wait
	// for a core (Reader.Unhandled fences it meanwhile). Zero when it was
	// not read by a Fetcher.
	Received time.Time
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordSet is what one fetch returned for one partition: whole record
// batches, checked.
type recordSet struct {
	data []byte
	// next is the offset after the last batch: where the next fetch
	// starts, past records that are no messages (transaction markers) and
	// offsets compaction removed.
	next int64
	// legacy: some batch is an old message set (v0 or v1), read by
	// kafka-go's decoder.
	legacy bool
}

// scanRecords checks the batches of one partition's records: it keeps the
// whole ones (the broker may cut the last one short) and checks their CRC.
// Records are not read here: that is for eachMessage, on the reader's
// goroutine.
func scanRecords(data []byte) (recordSet, error) {
	rs := recordSet{next: -1}
	pos := 0
	for len(data)-pos >= batchHeaderLen {
		base := int64(binary.BigEndian.Uint64(data[pos:]))
		length := int(int32(binary.BigEndian.Uint32(data[pos+batchLengthAt:])))
		end := pos + batchHeaderLen + length
		if length < 0 || end > len(data) || end < pos+batchMagicAt+1 {
			break // cut short by the size limit
		}
		switch magic := data[pos+batchMagicAt]; magic {
		case 2:
			if end < pos+batchRecordsAt {
				return rs, fmt.Errorf("record batch at offset %d: %d bytes, shorter than its header", base, length)
			}
			want := binary.BigEndian.Uint32(data[pos+batchCRCAt:])
			if got := crc32.Checksum(data[pos+batchAttributesAt:end], castagnoli); got != want {
				return rs, fmt.Errorf("record batch at offset %d: crc32 checksum mismatch (computed=%d found=%d)", base, got, want)
			}
			rs.next = base + int64(int32(binary.BigEndian.Uint32(data[pos+batchLastDeltaAt:]))) + 1
		case 0, 1:
			rs.legacy = true
			rs.next = base + 1
		default:
			return rs, fmt.Errorf("record batch at offset %d: unknown format (magic byte %d)", base, magic)
		}
		pos = end
	}
	rs.data = data[:pos]
	return rs, nil
}

// eachMessage calls each with every message of rs at or after offset from,
// in offset order (a fetch returns whole batches, which may start before
// the offset asked for). Transaction markers are no messages. Key, Value
// and the header values point into rs's bytes. A LogAppendTime batch's
// messages all take the batch's max timestamp, as Kafka's consumer gives
// them: the broker stamps the batch, not its records.
func eachMessage(rs recordSet, topic string, partition int, hwm, from int64, each func(Message)) error {
	if rs.legacy {
		return eachLegacyMessage(rs, topic, partition, hwm, from, each)
	}
	data := rs.data
	for pos := 0; pos < len(data); {
		base := int64(binary.BigEndian.Uint64(data[pos:]))
		end := pos + batchHeaderLen + int(binary.BigEndian.Uint32(data[pos+batchLengthAt:]))
		batch := data[pos:end]
		pos = end
		attributes := binary.BigEndian.Uint16(batch[batchAttributesAt:])
		if attributes&attrControl != 0 {
			continue
		}
		last := base + int64(int32(binary.BigEndian.Uint32(batch[batchLastDeltaAt:])))
		if last < from {
			continue
		}
		records := batch[batchRecordsAt:]
		if c := compress.Compression(attributes & attrCompression); c != compress.None {
			var err error
			if records, err = decompress(c, records); err != nil {
				return fmt.Errorf("record batch at offset %d: %w", base, err)
			}
		}
		b := batchReader{topic: topic, partition: partition, hwm: hwm, base: base,
			firstTimestamp: int64(binary.BigEndian.Uint64(batch[batchTimestampAt:]))}
		if attributes&attrLogAppendTime != 0 {
			b.timestampType = LogAppendTime
			b.appendTime = unixMilli(int64(binary.BigEndian.Uint64(batch[batchMaxTimeAt:])))
		}
		count := int(int32(binary.BigEndian.Uint32(batch[batchCountAt:])))
		if err := b.each(records, count, from, each); err != nil {
			return fmt.Errorf("record batch at offset %d: %w", base, err)
		}
	}
	return nil
}

func decompress(c compress.Compression, b []byte) ([]byte, error) {
	codec := c.Codec()
	if codec == nil {
		return nil, fmt.Errorf("unsupported compression codec %d", c)
	}
	r := codec.NewReader(bytes.NewReader(b))
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", codec.Name(), err)
	}
	return out, nil
}

var errRecordTruncated = errors.New("record truncated")

// batchReader reads the records of one batch.
type batchReader struct {
	topic          string
	partition      int
	hwm            int64
	base           int64
	firstTimestamp int64
	timestampType  TimestampType
	appendTime     time.Time // the broker's, for LogAppendTime
	b              []byte
	err            error
}

func (r *batchReader) each(records []byte, count int, from int64, each func(Message)) error {
	r.b = records
	for range count {
		length := r.varint()
		if r.err != nil {
			return r.err
		}
		if length < 0 || int(length) > len(r.b) {
			return errRecordTruncated
		}
		rest := r.b[length:]
		r.b = r.b[:length]
		m, err := r.record()
		if err != nil {
			return err
		}
		r.b = rest
		if m.Offset >= from {
			each(m)
		}
	}
	return nil
}

// record reads one record (its length already taken off).
func (r *batchReader) record() (Message, error) {
	r.skip(1) // attributes, unused
	timestampDelta := r.varint()
	offsetDelta := r.varint()
	m := Message{TimestampType: r.timestampType, Message: kafka.Message{Topic: r.topic, Partition: r.partition,
		HighWaterMark: r.hwm, Offset: r.base + offsetDelta, Time: r.appendTime}}
	if r.timestampType == CreateTime {
		m.Time = unixMilli(r.firstTimestamp + timestampDelta)
	}
	m.Key = r.bytes()
	m.Value = r.bytes()
	if n := r.varint(); n > 0 && r.err == nil {
		if int(n) > len(r.b) {
			return m, errRecordTruncated
		}
		m.Headers = make([]kafka.Header, n)
		for i := range m.Headers {
			m.Headers[i].Key = string(r.bytes())
			m.Headers[i].Value = r.bytes()
		}
	}
	return m, r.err
}

func unixMilli(ms int64) time.Time {
	return time.Unix(ms/1000, (ms%1000)*int64(time.Millisecond))
}

// varint reads a zigzag-encoded varint.
func (r *batchReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errRecordTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a length-prefixed byte string: nil for length -1.
func (r *batchReader) bytes() []byte {
	n := r.varint()
	if r.err != nil || n < 0 {
		return nil
	}
	if int(n) > len(r.b) {
		r.err = errRecordTruncated
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *batchReader) skip(n int) {
	if r.err != nil {
		return
	}
	if n > len(r.b) {
		r.err = errRecordTruncated
		return
	}
	r.b = r.b[n:]
}

// eachLegacyMessage reads records with kafka-go's decoder: old message
// sets (v0, v1), which a log may still hold from before Kafka 0.11. Their
// timestamps are reported as CreateTime: kafka-go does not say which they
// are, and brokers write no new ones since Kafka 0.11.
func eachLegacyMessage(rs recordSet, topic string, partition int, hwm, from int64, each func(Message)) error {
	framed := make([]byte, 4, 4+len(rs.data))
	binary.BigEndian.PutUint32(framed, uint32(len(rs.data)))
	framed = append(framed, rs.data...)
	var set protocol.RecordSet
	if _, err := set.ReadFrom(bytes.NewReader(framed)); err != nil {
		return err
	}
	if set.Records == nil {
		return nil
	}
	for {
		r, err := set.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.Offset < from {
			continue
		}
		m := Message{Message: kafka.Message{Topic: topic, Partition: partition, Offset: r.Offset, HighWaterMark: hwm, Time: r.Time}}
		if r.Key != nil {
			if m.Key, err = protocol.ReadAll(r.Key); err != nil {
				return err
			}
		}
		if r.Value != nil {
			if m.Value, err = protocol.ReadAll(r.Value); err != nil {
				return err
			}
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
		each(m)
	}
}
