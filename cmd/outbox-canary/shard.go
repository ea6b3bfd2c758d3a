package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/shard"
)

// The environment variables of the shard flags: a StatefulSet sets
// OUTBOX_CANARY_SHARD_ORDINAL from the pod's name (the downward API's
// metadata.name), the same for every pod of its template.
const (
	envShardCount   = "OUTBOX_CANARY_SHARD_COUNT"
	envShardIndex   = "OUTBOX_CANARY_SHARD_INDEX"
	envShardOrdinal = "OUTBOX_CANARY_SHARD_ORDINAL"
)

// shardFlags are the flags that place a prober among shards.
type shardFlags struct {
	count          *int
	index, ordinal *string
}

func addShardFlags(cmd *kingpin.CmdClause) *shardFlags {
	f := &shardFlags{}
	f.count = cmd.Flag("shard.count", "Split the file's pipelines among this many shards by Prometheus' hashmod of their names (docs/fleet.md); 1 measures them all.").
		Envar(envShardCount).Default("1").Int()
	f.index = cmd.Flag("shard.index", "This prober's shard, 0 to --shard.count-1. Exclusive with --shard.ordinal.").
		Envar(envShardIndex).PlaceHolder("N").String()
	f.ordinal = cmd.Flag("shard.ordinal", "This prober's position among shards × replicas: a number or a StatefulSet pod name (outbox-canary-4); its shard is the ordinal mod --shard.count.").
		Envar(envShardOrdinal).PlaceHolder("POD-NAME").String()
	return f
}

// resolve returns the prober's shard, or an error naming the flag (and its
// environment variable) that is wrong.
func (f *shardFlags) resolve() (shard.Shard, error) {
	s, err := shard.New(*f.count, *f.index, *f.ordinal)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, shard.ErrCount):
		return s, fmt.Errorf("--shard.count (%s): %w", envShardCount, err)
	case errors.Is(err, shard.ErrIndex):
		return s, fmt.Errorf("--shard.index (%s): %w", envShardIndex, err)
	case errors.Is(err, shard.ErrOrdinal):
		return s, fmt.Errorf("--shard.ordinal (%s): %w", envShardOrdinal, err)
	case errors.Is(err, shard.ErrBoth):
		return s, fmt.Errorf("--shard.index (%s) and --shard.ordinal (%s): %w", envShardIndex, envShardOrdinal, err)
	case errors.Is(err, shard.ErrUnplaced):
		return s, fmt.Errorf("--shard.count %d needs --shard.index or --shard.ordinal (%s or %s; in a StatefulSet, the pod's name): %w",
			*f.count, envShardIndex, envShardOrdinal, shard.ErrUnplaced)
	}
	return s, err
}

// keepShard removes from cfg the pipelines of other shards and returns how
// many the file had.
func keepShard(cfg *config.Config, s shard.Shard) (total int) {
	total = len(cfg.Pipelines)
	kept := cfg.Pipelines[:0:0]
	for _, p := range cfg.Pipelines {
		if s.Owns(p.Name) {
			kept = append(kept, p)
		}
	}
	cfg.Pipelines = kept
	return total
}

// describeShards prints which shard measures which pipeline, and which one
// this prober is (none when s.Index is -1), when the flags shard the file.
func describeShards(w io.Writer, cfg *config.Config, s shard.Shard) {
	if !s.Sharded() {
		return
	}
	names := make([]string, len(cfg.Pipelines))
	for i := range cfg.Pipelines {
		names[i] = cfg.Pipelines[i].Name
	}
	this := ""
	if s.Index >= 0 {
		this = fmt.Sprintf("; this prober is shard %d", s.Index)
	}
	fmt.Fprintf(w, "\nshards: %d, by hashmod of the pipeline name (docs/fleet.md)%s\n", s.Count, this)
	for i, ns := range shard.Assign(names, s.Count) {
		this := ""
		if i == s.Index {
			this = " (this prober)"
		}
		fmt.Fprintf(w, "  shard %d%s: %d pipelines: %s\n", i, this, len(ns), orDash(strings.Join(ns, ", ")))
	}
}
