// Package shard splits a configuration's pipelines among probers, so that
// a fleet too large for one process (or one that must survive a node) runs
// as several. A pipeline belongs to exactly one shard, chosen from its name
// alone by the hash Prometheus' hashmod relabelling uses:
//
//	shard = uint64(big-endian bytes 8..15 of MD5(name)) mod count
//
// so anyone can reproduce it (`printf %s NAME | md5sum`, take hex digits
// 17 to 32, mod count), the same name stays on the same shard across
// restarts, releases and machines, and adding a pipeline moves no other.
// Changing count moves about (count-1)/count of them, as any modulus does.
//
// Each shard may run several replicas: they share the shard's pipelines
// and measure them independently, each under its own instance id. On
// Kubernetes one StatefulSet of shards × replicas pods gives pod ordinal k
// the shard k mod count, so ordinals 0..count-1 are the first replica of
// every shard and scaling replicas up adds one pod to each shard.
//
// Nothing here changes what is measured or exported: the rules and
// dashboards are made from the whole configuration, and a pipeline's series
// come from whichever probers own it.
package shard

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Of is the shard of the pipeline name among count shards (count ≥ 1).
func Of(name string, count int) int {
	sum := md5.Sum([]byte(name))
	// Prometheus folds the whole digest into a uint64 with shifts that
	// drop its first 8 bytes; the last 8, big-endian, are what remains.
	return int(binary.BigEndian.Uint64(sum[8:]) % uint64(count))
}

// Shard is one prober's share: the pipelines whose Of is Index.
type Shard struct {
	Index, Count int
}

// All is the shard of an unsharded prober: every pipeline.
var All = Shard{Index: 0, Count: 1}

// Owns says whether the pipeline name belongs to the shard.
func (s Shard) Owns(name string) bool { return s.Count <= 1 || Of(name, s.Count) == s.Index }

// Sharded says whether the shard is a proper part of the pipelines.
func (s Shard) Sharded() bool { return s.Count > 1 }

func (s Shard) String() string { return fmt.Sprintf("%d of %d", s.Index, s.Count) }

// Select returns the names that belong to the shard, in their order.
func (s Shard) Select(names []string) []string {
	var out []string
	for _, n := range names {
		if s.Owns(n) {
			out = append(out, n)
		}
	}
	return out
}

// Assign lists the names of every shard of count: Assign(names, 3)[1] is
// shard 1's.
func Assign(names []string, count int) [][]string {
	out := make([][]string, count)
	for _, n := range names {
		i := Of(n, count)
		out[i] = append(out[i], n)
	}
	return out
}

// Errors of New, for callers that word them for their own inputs.
var (
	ErrCount    = errors.New("the shard count must be at least 1")
	ErrIndex    = errors.New("the shard index must be a whole number from 0 to count-1")
	ErrOrdinal  = errors.New("not an ordinal: a whole number, or a StatefulSet pod name ending in -<ordinal> (such as outbox-canary-4)")
	ErrBoth     = errors.New("give the shard index or the ordinal, not both")
	ErrUnplaced = errors.New("more than one shard, and neither the shard index nor the ordinal is given")
)

// New resolves a prober's shard from count and at most one of index (the
// shard itself) and ordinal (a replica's position among shards × replicas:
// a number or a StatefulSet pod name such as outbox-canary-4, whose shard
// is ordinal mod count). Empty strings are not given. With count 1 neither
// is needed.
func New(count int, index, ordinal string) (Shard, error) {
	index, ordinal = strings.TrimSpace(index), strings.TrimSpace(ordinal)
	switch {
	case count < 1:
		return Shard{}, fmt.Errorf("%d: %w", count, ErrCount)
	case index != "" && ordinal != "":
		return Shard{}, ErrBoth
	case index != "":
		i, err := strconv.Atoi(index)
		if err != nil || i < 0 || i >= count {
			return Shard{}, fmt.Errorf("%q with count %d: %w", index, count, ErrIndex)
		}
		return Shard{Index: i, Count: count}, nil
	case ordinal != "":
		k, err := ParseOrdinal(ordinal)
		if err != nil {
			return Shard{}, err
		}
		return Shard{Index: k % count, Count: count}, nil
	case count > 1:
		return Shard{}, fmt.Errorf("count %d: %w", count, ErrUnplaced)
	}
	return All, nil
}

// ParseOrdinal reads an ordinal: a whole number, or the number after the
// last '-' of a StatefulSet pod name (its host name).
func ParseOrdinal(s string) (int, error) {
	digits := s
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		digits = s[i+1:]
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%q: %w", s, ErrOrdinal)
	}
	k, err := strconv.Atoi(digits)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, ErrOrdinal)
	}
	return k, nil
}
