// Package judge turns what the prober learns about its canaries into
// per-segment verdicts, charging a segment only on evidence that the canary
// was inside it. It is a pure state machine, in the manner of etcd's raft:
// events go in (a canary sent, a message arrived, a stamp looked up or not,
// the readers' position on the canary topic, the clock), verdicts and
// effects come out (SLI events, latencies to observe, stamps to look up,
// canaries that are final). It does no I/O, holds no lock and reads no
// clock: every event carries its time. The prober's Tracker is the thin
// shell around it that locks, persists, looks stamps up and applies the
// effects to metrics.
//
// # Stamps
//
// A canary's stamps, in pipeline order: commit, the relay's extra stamps
// (read, ...), publish, consume. All are on the prober's clock when the
// judge sees them (the shell converts published_at with the measured
// database clock offset, and passes the offset's error bound).
//
//   - commit is an interval: from sending the statement that commits (the
//     canary's lone INSERT, which commits before it answers, or COMMIT)
//     to hearing it returned.
//     Segments that start at commit are measured from its start, an upper
//     bound, so that a relay reading the row before our client hears back is
//     never taken for skew. The interval's width is reported with the canary.
//   - consume is taken by the prober when the record is fetched, before any
//     I/O, and the shell never lets the judge's clock pass an arrival it has
//     not been told of yet (a fence): a canary consumed before its deadline
//     is never bad.
//   - published_at is written after the broker's ack, often after the
//     relay's whole batch: a stamp taken after its event. It is read back
//     from the row (a lookup), first Config.LookupSettle after the canary's
//     arrival so that the relay has written it, then at backed-off
//     retries while it reads NULL, until ArrivedLookupWindow. When it lies after
//     the consume stamp (beyond the offset's error bound and skew tolerance),
//     that is stamp order, not clock skew: the segments next to it are
//     judged by what can be proven (good when even the bound that includes
//     the late stamp is within budget, else unjudged as stamp_order) and the
//     negative segment is counted in stamp_order, never as a latency and
//     never as skew.
//   - Other stamps (relay headers, the record timestamp) come from clocks
//     the prober cannot measure. A segment negative beyond relay.skew_tolerance
//     is suspected skew: counted, not observed, not judged. A stamp more than
//     relay.max_clock_skew outside [commit, consume] is invalid: counted by
//     reason, and its segments are not judged.
//
// # The blame rule
//
// A segment is charged bad only on evidence that the canary was inside it
// for longer than its budget. An arrived canary is judged by its stamps. A
// canary that has not arrived is placed by evidence when a deadline passes:
//
//   - end_to_end is bad once commit + its budget has passed without arrival
//     (the commit-returned bound, so that no arrival before the deadline can
//     be late), unless the prober itself could not have consumed it: it was
//     down after the commit (prober_down), or its readers were behind
//     because of its own backlog: catching up after a restart (prober_down)
//     or reading a flood of messages that are not its canaries (prober_lag).
//   - The readers' position decides which side of publish the canary is on.
//     If they had read every partition up to its high watermark as of a
//     moment after the deadline, and the canary was not there, it was not
//     published: it is on the publish side, in the segment after the latest
//     stamp it is proven to have passed. A published_at claim that the topic
//     contradicts proves the relay read the row (it marks after sending), so
//     the segment ending at publish is charged from the claimed time: a relay
//     that drops the message is charged, not Kafka. Stamps only the message
//     carries cannot be proven before arrival: then the earliest publish-side
//     segment after the last proven stamp is charged (a polling relay reads
//     and publishes in one batch step, so an unpublished canary is almost
//     always unread).
//   - A publish stamp taken at send (a relay header, the record timestamp)
//     is on the record before the brokers ack it. When the prober could not
//     reach the brokers at some point from a little before the canary's
//     commit until the caught-up moment (or was down then, and cannot
//     tell), the relay's producer may be holding the stamped record: the
//     canary may be past publish, so no publish-side segment is charged by
//     the position. It is judged by its stamps when it arrives. published_at
//     is written after the ack, so an outage does not blur it.
//   - If the readers were behind, the canary may be waiting in the topic: the
//     segment ending at consume is charged once end_to_end's deadline has
//     passed, unless the lag is the prober's own (prober_down, prober_lag).
//     The position at the deadline decides: readers behind on their own
//     that then run into a broker stall are charged to consumption, the
//     stall being what holds them at the deadline.
//   - Without any position (the prober cannot reach Kafka) no segment is
//     charged before arrival; end_to_end still is.
//
// Brokers out of reach are the brokers' outage, not the relay's lag. The
// shell reports every position sample that could not reach the brokers;
// the judge keeps their streaks (in its state, across restarts). A
// publish-side segment (one that ends at publish or before it) over its
// budget that overlapped such a streak, widened by a producer's reconnect
// grace on both sides, is not charged: it is unjudged as
// brokers_unreachable, before arrival and after. A polling relay whose
// send fails rolls back and reads the row again later, so its read and
// publish stamps say when it last tried, and the whole wait lands before
// them. end_to_end is still charged, and the page goes to the brokers'
// owner through the prober's own Kafka dependency alert (package alerts).
// The price: a relay that stalls while the prober cannot reach the
// brokers is not charged for it either.
//
// An outage that begins and ends while the prober is down leaves no failed
// sample, yet the relay re-reads what it failed to send then. So a
// publish-side segment near a downtime counts the relay's time only from
// the downtime's end plus the grace: within budget from there, it is
// unjudged as prober_down; past it, charged as ever, only later (by at
// most the grace after a restart). The judge's model found the gap
// (go test ./prober/judge -run TestModelJudge -model.runs=6000).
//
// A segment unjudged for the prober's own trouble (prober_down,
// prober_lag) is not observed in the latency histograms either: its
// duration holds our downtime or backlog, not the pipeline's latency.
//
// Otherwise segments that only the relay's side can slow down keep their
// verdict whatever the prober did: a canary proven unpublished after the
// prober's restart was unpublished during its downtime too.
//
// Each canary gets at most one outcome per segment it entered, and none for
// a segment it never entered: good, bad, or unjudged with a reason
// (prober_down, prober_lag, unknown, invalid_stamp, missing_stamp,
// stamp_order, clock_skew, lost, brokers_unreachable). A stamp the shell
// cannot read because the prober's own dependency is down is retried until
// the canary would be lost, then unknown, never missing_stamp.
package judge
