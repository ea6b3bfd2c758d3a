package relay

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Error stages, the values of the "stage" label of outbox_relay_poll_errors_total.
const (
	stageDatabase = "database"
	stageKafka    = "kafka"
)

// Fault kinds, the values of the "fault" label of outbox_relay_faults_injected_total.
const (
	faultPause     = "pause"
	faultDelay     = "delay"
	faultMarkDelay = "mark_delay"
	faultDrop      = "drop"
	faultDuplicate = "duplicate"
)

type metrics struct {
	polls          prometheus.Counter
	pollErrors     *prometheus.CounterVec
	rowsPublished  prometheus.Counter
	messagesSent   prometheus.Counter
	batchDuration  prometheus.Histogram
	faultsInjected *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, faults *Faults) (*metrics, error) {
	m := &metrics{
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_polls_total",
			Help: "Claim queries run against the outbox table. Paused polls are not counted here but in outbox_relay_faults_injected_total{fault=\"pause\"}.",
		}),
		pollErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_poll_errors_total",
			Help: "Polls that failed and were rolled back, leaving their rows unpublished, by the stage that failed (database or kafka).",
		}, []string{"stage"}),
		rowsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_rows_published_total",
			Help: "Outbox rows marked published (or deleted) in committed batches, dropped rows included.",
		}),
		messagesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_messages_sent_total",
			Help: "Kafka messages acknowledged by the brokers, duplicates included.",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_relay_batch_duration_seconds",
			Help:    "Time from claiming a non-empty batch to committing it, injected delay included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		faultsInjected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_faults_injected_total",
			Help: "Injected faults that took effect: pause per skipped poll, delay and mark_delay per delayed batch, drop and duplicate per row.",
		}, []string{"fault"}),
	}
	for _, s := range []string{stageDatabase, stageKafka} {
		m.pollErrors.WithLabelValues(s)
	}
	for _, f := range []string{faultPause, faultDelay, faultMarkDelay, faultDrop, faultDuplicate} {
		m.faultsInjected.WithLabelValues(f)
	}
	paused := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_paused",
		Help: "1 while the relay is paused by fault injection, else 0.",
	}, func() float64 {
		if faults.State().Paused {
			return 1
		}
		return 0
	})
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.polls, m.pollErrors, m.rowsPublished, m.messagesSent, m.batchDuration, m.faultsInjected, paused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering relay metrics: %w", err)
		}
	}
	return m, nil
}
