package session

import "sort"

// IDs returns the ids of the open sessions, sorted (the admin endpoint's
// sessions listing).
func (e *Engine) IDs() []string {
	e.mu.RLock()
	ids := make([]string, 0, len(e.sessions))
	for id := range e.sessions {
		ids = append(ids, id)
	}
	e.mu.RUnlock()
	sort.Strings(ids)
	return ids
}
