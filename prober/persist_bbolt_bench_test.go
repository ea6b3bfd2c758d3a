package prober

import (
	"encoding/json"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outbox-canary/outbox-canary/prober/judge"
)

// boltStore: the alternative of an embedded store, one key per canary.
type boltStore struct {
	db    *bolt.DB
	n     int64
	first bool
}

func newBoltStore(dir string) *boltStore {
	db, err := bolt.Open(filepath.Join(dir, "payments.db"), 0o600, nil)
	if err != nil {
		panic(err)
	}
	return &boltStore{db: db, first: true}
}

func (s *boltStore) save(j *judge.Judge, now time.Time) error {
	d := j.Delta()
	canaries := d.Canaries
	if s.first {
		canaries = j.Canaries()
		s.first = false
	}
	meta := j.State().Meta()
	meta.AliveAt = now
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("canaries"))
		if err != nil {
			return err
		}
		for _, c := range canaries {
			v, err := json.Marshal(c)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(c.ID), v); err != nil {
				return err
			}
		}
		for _, id := range d.Forgotten {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		m, err := tx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		v, err := json.Marshal(&meta)
		if err != nil {
			return err
		}
		return m.Put([]byte("meta"), v)
	})
	if err != nil {
		return err
	}
	s.n += 2 // bbolt fdatasyncs the pages, then the meta page
	j.MarkPersisted(now)
	return nil
}

func (s *boltStore) syncs() int64 { return s.n }
