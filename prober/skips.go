package prober

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// skipWarnEvery is how often a reason that keeps skipping messages is
// warned about again after its first warning. A canary topic that carries
// the wrong encoding skips every canary; one line per canary would bury
// the log, silence would hide why every canary is lost.
const skipWarnEvery = 5 * time.Minute

// skipLog decides, per skip reason, whether a skipped message is worth a
// warning: the first of each reason always, then one every skipWarnEvery
// with the count skipped in between. Each Consumer has one, so the limit
// is per pipeline. The zero value is ready to use.
type skipLog struct {
	mu      sync.Mutex
	reasons map[string]*skipCount
}

type skipCount struct {
	warned     time.Time
	suppressed int // skipped since the last warning
}

// warn reports whether the first of n skips of a reason in a row is to
// be logged at warn level, and how many of its reason went by unwarned
// before it since the last warning. The other n-1 go by unwarned.
func (l *skipLog) warn(reason string, now time.Time, n int) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reasons == nil {
		l.reasons = map[string]*skipCount{}
	}
	c, seen := l.reasons[reason]
	if !seen {
		l.reasons[reason] = &skipCount{warned: now, suppressed: n - 1}
		return true, 0
	}
	if now.Sub(c.warned) < skipWarnEvery {
		c.suppressed += n
		return false, 0
	}
	before := c.suppressed
	c.warned, c.suppressed = now, n-1
	return true, before
}

// logSkip logs a skipped message: at warn level, with what to do, for the
// first of its reason and then at most every skipWarnEvery; at debug level
// otherwise. detail (the decoder's error, or what identifies the canary)
// is put into words only for a line that is logged: a flood of skips at
// info level costs no formatting. The consumer's logger already names the
// pipeline.
func (l *skipLog) logSkip(log *slog.Logger, now time.Time, msg kafka.Message, reason string, detail skipDetail) {
	warn, suppressed := l.warn(reason, now, 1)
	if !warn && !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	args := []any{"topic", msg.Topic, "partition", msg.Partition, "offset", msg.Offset,
		"reason", reason, "detail", detail.String()}
	if !warn {
		log.Debug("message on the canary topic skipped", args...)
		return
	}
	warnSkip(log, reason, suppressed, args)
}

// logRun logs n skips of one reason in a row, first the first of them, as
// logSkip would when debug logging is off: the first may be warned about,
// the others go by unwarned, to be counted in the next warning.
func (l *skipLog) logRun(log *slog.Logger, now time.Time, first kafka.Message, reason string, detail skipDetail, n int) {
	warn, suppressed := l.warn(reason, now, n)
	if !warn {
		return
	}
	warnSkip(log, reason, suppressed, []any{"topic", first.Topic, "partition", first.Partition, "offset", first.Offset,
		"reason", reason, "detail", detail.String()})
}

func warnSkip(log *slog.Logger, reason string, suppressed int, args []any) {
	if suppressed > 0 {
		args = append(args, "skipped_since_last_warning", suppressed)
	}
	args = append(args, "fix", SkipFix(reason))
	log.Warn(fmt.Sprintf("message on the canary topic skipped (%s); the next ones of this reason are logged at debug level, with a reminder every %s", reason, skipWarnEvery), args...)
}

// SkipFix says what to do about messages skipped for a reason: the hint
// of the skip warning, and of docs/cdc.md.
func SkipFix(reason string) string {
	switch reason {
	case ReasonUnsupportedEncoding:
		return "the relay writes values through a schema registry converter (Avro, Protobuf, JSON Schema), which the prober does not read: " +
			"set value.converter=org.apache.kafka.connect.json.JsonConverter (or org.apache.kafka.connect.storage.StringConverter) " +
			"on the connector that publishes the canaries (a connector's own setting overrides the worker's; see docs/cdc.md)"
	case ReasonMalformed:
		return "the value is no canary in any form the prober reads (JSON, Kafka Connect's JSON envelope, StringConverter text): " +
			"check that only the relay writes to the canary topic and routes nothing but canary rows there, and, with Debezium, " +
			"that the outbox EventRouter transforms the outbox table's events (outbox-canary lint checks the connector; see docs/cdc.md)"
	case ReasonBadSignature:
		return "a canary signed with another key: another prober writes to this topic with a different signing_key (a key rotated " +
			"on one instance only), or someone forges canaries; make the keys agree, or give each prober its own canary topic"
	case ReasonForeignInstance:
		return "canaries of another prober instance share this topic: expected when several instances use one canary topic; " +
			"otherwise check instance_id, which must differ between instances and stay the same across restarts"
	case ReasonUnknownPipeline:
		return "this instance signed the canary for another pipeline than this topic's (named in detail): another of its " +
			"pipelines, or one it ran before, sends its canaries to this topic (the same kafka.topic, or a canary.aggregate_type " +
			"the relay routes here); give each pipeline its own kafka.topic and canary.aggregate_type"
	case ReasonUnknownCanary:
		return "a canary of this instance that its state no longer holds (older than its memory, or sent before the state was lost): " +
			"expected once after a restart with a lost state directory"
	}
	return "see docs/metrics.md"
}
