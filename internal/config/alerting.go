package config

import (
	"errors"
	"time"
)

// Alerting shapes the generated Prometheus rules.
type Alerting struct {
	// RunbookURL is the base of each alert's runbook_url annotation; the
	// alert's anchor is appended.
	RunbookURL string `yaml:"runbook_url"`
	// StallIntervals is how many canary intervals without a delivery make
	// a stall.
	StallIntervals int `yaml:"stall_intervals"`
	// Labels are added to every rule (and to the PrometheusRule metadata).
	Labels map[string]string `yaml:"labels"`
	// OldestUnpublishedAge pages when the oldest unpublished row is older.
	OldestUnpublishedAge Duration `yaml:"oldest_unpublished_age"`
	// BacklogGrowthFor is how long the backlog must keep growing to alert.
	BacklogGrowthFor Duration `yaml:"backlog_growth_for"`
	// LongTransactionAge alerts on an open transaction older than this.
	LongTransactionAge Duration `yaml:"long_transaction_age"`
}

// DefaultRunbookURL points at the alert documentation in this repository.
const DefaultRunbookURL = "https://github.com/outbox-canary/outbox-canary/blob/main/docs/alerts.md"

func (a *Alerting) setDefaults() {
	setIfEmpty(&a.RunbookURL, DefaultRunbookURL)
	if a.StallIntervals == 0 {
		a.StallIntervals = 2
	}
	if a.OldestUnpublishedAge == 0 {
		a.OldestUnpublishedAge = Duration(time.Minute)
	}
	if a.BacklogGrowthFor == 0 {
		a.BacklogGrowthFor = Duration(10 * time.Minute)
	}
	if a.LongTransactionAge == 0 {
		a.LongTransactionAge = Duration(5 * time.Minute)
	}
}

func (a *Alerting) validate() error {
	if a.StallIntervals < 1 {
		return errors.New("stall_intervals: must be at least 1")
	}
	if a.OldestUnpublishedAge < 0 || a.BacklogGrowthFor < 0 || a.LongTransactionAge < 0 {
		return errors.New("durations must be positive")
	}
	return nil
}
