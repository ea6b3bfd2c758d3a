package kafkaclient

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// encodeBatch is one record batch as a broker stores it, encoded by
// kafka-go, its records at base, base+1, ...
func encodeBatch(t testing.TB, version int8, attrs protocol.Attributes, base int64, records ...protocol.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	rs := protocol.RecordSet{Version: version, Attributes: attrs, Records: protocol.NewRecordReader(records...)}
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:] // the record set's size
	if version == 2 {
		binary.BigEndian.PutUint64(b, uint64(base)) // kafka-go writes 0; the CRC does not cover it
		return b
	}
	// A message set: every message carries its own offset.
	for pos := 0; pos < len(b); {
		binary.BigEndian.PutUint64(b[pos:], uint64(base))
		base++
		pos += batchHeaderLen + int(binary.BigEndian.Uint32(b[pos+batchLengthAt:]))
	}
	return b
}

func controlBatch(t testing.TB, base int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	rs := protocol.RecordSet{Version: 2, Attributes: protocol.Control | protocol.Transactional,
		Records: protocol.NewControlBatch(protocol.ControlRecord{Version: 0, Type: 1, Time: time.UnixMilli(1_700_000_000_000)})}
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:]
	binary.BigEndian.PutUint64(b, uint64(base))
	return b
}

var testRecordTime = time.UnixMilli(1_764_000_000_123)

func testRecords(n int) []protocol.Record {
	rs := make([]protocol.Record, n)
	for i := range rs {
		rs[i] = protocol.Record{Time: testRecordTime.Add(time.Duration(i) * time.Millisecond),
			Key: protocol.NewBytes([]byte(fmt.Sprintf("order-%d", i))), Value: protocol.NewBytes([]byte(fmt.Sprintf(`{"n":%d}`, i)))}
		switch i % 4 {
		case 1:
			rs[i].Key = nil
			rs[i].Headers = []protocol.Header{{Key: "published_at", Value: []byte("1764000000123")}, {Key: "empty", Value: nil}}
		case 2:
			rs[i].Value = protocol.NewBytes([]byte{})
		case 3:
			rs[i].Value = nil // a tombstone
		}
	}
	return rs
}

// kafkaGoMessages is what kafka-go's own decoder reads from data.
func kafkaGoMessages(t testing.TB, data []byte, from int64) []kafka.Message {
	t.Helper()
	var out []kafka.Message
	err := eachLegacyMessage(recordSet{data: data, legacy: true}, "t", 3, 99, from, func(m Message) {
		out = append(out, m.Message)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readAll(t testing.TB, data []byte, from int64) (recordSet, []kafka.Message) {
	t.Helper()
	rs, err := scanRecords(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	if err := eachMessage(rs, "t", 3, 99, from, func(m Message) { out = append(out, m.Message) }); err != nil {
		t.Fatal(err)
	}
	return rs, out
}

// describe says everything of messages a handler may read, a nil key or
// value apart from an empty one.
func describe(ms []kafka.Message) string {
	var b strings.Builder
	show := func(v []byte) string {
		if v == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", v)
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "%s/%d@%d hwm %d time %d key %s value %s headers", m.Topic, m.Partition, m.Offset, m.HighWaterMark,
			m.Time.UnixMilli(), show(m.Key), show(m.Value))
		for _, h := range m.Headers {
			fmt.Fprintf(&b, " %s=%s", h.Key, show(h.Value))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestEachMessageReadsWhatKafkaGoReads(t *testing.T) {
	t.Parallel()
	for _, c := range []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			data := slicesConcat(
				encodeBatch(t, 2, protocol.Attributes(c), 10, testRecords(7)...),
				controlBatch(t, 17),
				encodeBatch(t, 2, protocol.Attributes(c), 18, testRecords(5)...),
			)
			for _, from := range []int64{0, 10, 13, 17, 18, 22} {
				rs, got := readAll(t, data, from)
				want := kafkaGoMessages(t, data, from)
				if describe(got) != describe(want) {
					t.Errorf("from %d: messages\n%s\nkafka-go reads\n%s", from, describe(got), describe(want))
				}
				if rs.next != 23 {
					t.Errorf("from %d: next %d, want 23", from, rs.next)
				}
			}
		})
	}
}

func TestScanRecordsKeepsWholeBatchesAndPassesTransactionMarkers(t *testing.T) {
	t.Parallel()
	first := encodeBatch(t, 2, 0, 0, testRecords(3)...)
	marker := controlBatch(t, 3)
	last := encodeBatch(t, 2, 0, 4, testRecords(3)...)
	tests := []struct {
		name     string
		data     []byte
		wantNext int64
		wantN    int
	}{
		{"a batch cut short by the size limit is left for the next fetch", slicesConcat(first, last[:len(last)-5]), 3, 3},
		{"a cut that leaves less than a batch header is left too", slicesConcat(first, last[:7]), 3, 3},
		{"a fetch of only a transaction marker moves past it", marker, 4, 0},
		{"a marker between batches is no message", slicesConcat(first, marker, last), 7, 6},
		{"no records", nil, -1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, got := readAll(t, tc.data, 0)
			if rs.next != tc.wantNext || len(got) != tc.wantN {
				t.Errorf("next %d and %d messages, want %d and %d", rs.next, len(got), tc.wantNext, tc.wantN)
			}
		})
	}
}

func TestScanRecordsRefusesACorruptBatch(t *testing.T) {
	t.Parallel()
	data := encodeBatch(t, 2, 0, 0, testRecords(3)...)
	data[len(data)-2] ^= 0xff
	if _, err := scanRecords(data); err == nil || !strings.Contains(err.Error(), "crc32") {
		t.Errorf("a batch with a flipped byte: %v, want a checksum error", err)
	}
	data = encodeBatch(t, 2, 0, 0, testRecords(1)...)
	data[batchMagicAt] = 7
	if _, err := scanRecords(data); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("an unknown format: %v, want an error naming the magic byte", err)
	}
}

func TestEachMessageReadsOldMessageSetsThroughKafkaGo(t *testing.T) {
	t.Parallel()
	recs := testRecords(4)
	for i := range recs {
		recs[i].Headers = nil // v1 messages have none
	}
	data := encodeBatch(t, 1, 0, 40, recs...)
	rs, got := readAll(t, data, 41)
	if !rs.legacy || rs.next != 44 {
		t.Errorf("legacy %v, next %d, want true and 44", rs.legacy, rs.next)
	}
	if len(got) != 3 || got[0].Offset != 41 || string(got[0].Value) != `{"n":1}` {
		t.Errorf("messages %+v, want offsets 41 to 43", got)
	}
}

// TestFetchResponseDecodesRecordsAsSent: the registered Fetch response
// type leaves the records as the broker sent them.
func TestFetchResponseDecodesRecordsAsSent(t *testing.T) {
	t.Parallel()
	records := encodeBatch(t, 2, 0, 5, testRecords(3)...)
	sent := &fetchResponse{SessionID: 7, Topics: []fetchResponseTopic{{Topic: "t", Partitions: []fetchResponsePartition{
		{Partition: 1, HighWatermark: 8, Records: records},
		{Partition: 2, ErrorCode: 1, HighWatermark: -1},
	}}}}
	var buf bytes.Buffer
	if err := protocol.WriteResponse(&buf, 11, 42, sent); err != nil {
		t.Fatal(err)
	}
	id, m, err := protocol.ReadResponse(bufio.NewReader(&buf), protocol.Fetch, 11)
	if err != nil || id != 42 {
		t.Fatalf("read response: id %d, %v", id, err)
	}
	got, ok := m.(*fetchResponse)
	if !ok {
		t.Fatalf("a fetch is answered with %T, want *fetchResponse", m)
	}
	if fmt.Sprint(got) != fmt.Sprint(sent) {
		t.Errorf("read\n%v\nsent\n%v", got, sent)
	}
}

func slicesConcat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// BenchmarkEachMessage reads the records of one partition's fetch: 5000
// foreign messages of ~200 bytes, as kcat produces them in the bench.
func BenchmarkEachMessage(b *testing.B) {
	const n = 5000
	recs := make([]protocol.Record, n)
	for i := range recs {
		recs[i] = protocol.Record{Time: testRecordTime, Key: protocol.NewBytes([]byte(fmt.Sprintf("order-%d", i%10007))),
			Value: protocol.NewBytes([]byte(fmt.Sprintf(`{"orderId":"order-%d","status":"SHIPPED","customerId":"c-%d","amount":%d,"currency":"EUR","items":[{"sku":"sku-%d","qty":%d}],"updatedAt":"2026-01-01T00:00:00Z"}`, i, i%997, 1000+i%9000, i%503, 1+i%5)))}
	}
	var data []byte
	for i := 0; i < n; i += 500 {
		data = append(data, encodeBatch(b, 2, 0, int64(i), recs[i:i+500]...)...)
	}
	b.Run("ours", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			rs, err := scanRecords(data)
			if err != nil {
				b.Fatal(err)
			}
			count := 0
			if err := eachMessage(rs, "t", 0, n, 0, func(Message) { count++ }); err != nil || count != n {
				b.Fatal(count, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/message")
	})
	b.Run("kafka-go", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			count := 0
			if err := eachLegacyMessage(recordSet{data: data, legacy: true}, "t", 0, n, 0, func(Message) { count++ }); err != nil || count != n {
				b.Fatal(count, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/message")
	})
}

// logAppended does to a v2 batch what a broker does on a topic with
// message.timestamp.type=LogAppendTime: it sets the timestamp-type bit and
// writes its append time into the max timestamp, leaving the records and
// their CreateTime deltas as the producer wrote them, and seals the batch
// with a new CRC.
func logAppended(batch []byte, appended time.Time) []byte {
	b := bytes.Clone(batch)
	attrs := binary.BigEndian.Uint16(b[batchAttributesAt:])
	binary.BigEndian.PutUint16(b[batchAttributesAt:], attrs|attrLogAppendTime)
	binary.BigEndian.PutUint64(b[batchMaxTimeAt:], uint64(appended.UnixMilli()))
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttributesAt:], castagnoli))
	return b
}

func TestEachMessageTakesTheBrokersAppendTimeFromALogAppendTimeBatch(t *testing.T) {
	t.Parallel()
	appended := testRecordTime.Add(90 * time.Minute) // the producer's clock is far behind the broker's
	for _, c := range []compress.Compression{compress.None, compress.Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			created := encodeBatch(t, 2, protocol.Attributes(c), 10, testRecords(3)...)
			data := slicesConcat(created, logAppended(encodeBatch(t, 2, protocol.Attributes(c), 13, testRecords(3)...), appended))
			rs, err := scanRecords(data)
			if err != nil {
				t.Fatalf("a broker-stamped batch fails its checks: %v", err)
			}
			var got []Message
			if err := eachMessage(rs, "t", 3, 99, 11, func(m Message) { got = append(got, m) }); err != nil {
				t.Fatal(err)
			}
			if len(got) != 5 {
				t.Fatalf("%d messages from offset 11, want 5", len(got))
			}
			for _, m := range got {
				want, wantType := testRecordTime.Add(time.Duration(m.Offset-10)*time.Millisecond), CreateTime
				if m.Offset >= 13 {
					want, wantType = appended, LogAppendTime
				}
				if !m.Time.Equal(want) || m.TimestampType != wantType {
					t.Errorf("offset %d: time %s (%s), want %s (%s)", m.Offset, m.Time.UTC(), m.TimestampType, want.UTC(), wantType)
				}
			}
			// The rest of the record is read as from a CreateTime batch.
			var plain []kafka.Message
			for _, m := range got {
				m.Time = time.Time{}
				plain = append(plain, m.Message)
			}
			var want []kafka.Message
			for _, m := range kafkaGoMessages(t, data, 11) {
				m.Time = time.Time{}
				want = append(want, m)
			}
			if describe(plain) != describe(want) {
				t.Errorf("messages\n%s\nkafka-go reads\n%s", describe(plain), describe(want))
			}
		})
	}
}
