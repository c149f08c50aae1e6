package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessionsMax bounds the logins a dashboard remembers at once; past it, a
// new login ends the one closest to its expiry.
const sessionsMax = 10000

// sessions are the logins of one dashboard, kept in its memory: a session
// cookie is a random ID that is valid while the dashboard remembers it.
// Sign-out forgets it, so a copy of the cookie replayed later is refused;
// a restart forgets them all.
type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[sha256.Size]byte]time.Time // the ID's hash -> its expiry
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[[sha256.Size]byte]time.Time{}}
}

// create returns the ID of a new session.
func (s *sessions) create() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, exp := range s.m {
		if now.After(exp) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= sessionsMax {
		var first [sha256.Size]byte
		var firstExp time.Time
		for k, exp := range s.m {
			if firstExp.IsZero() || exp.Before(firstExp) {
				first, firstExp = k, exp
			}
		}
		delete(s.m, first)
	}
	s.m[sha256.Sum256([]byte(id))] = now.Add(s.ttl)
	return id
}

// valid reports whether id is a live session. Keys are hashes, so the
// map's lookup time says nothing about the IDs it holds.
func (s *sessions) valid(id string) bool {
	if id == "" {
		return false
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.m[k]
	if ok && time.Now().After(exp) {
		delete(s.m, k)
		return false
	}
	return ok
}

// revoke ends session id.
func (s *sessions) revoke(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}
