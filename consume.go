package echopubsub

import (
	"errors"
	"fmt"
	"sort"
)

// Consume helpers: do the application work, then acknowledge exactly what
// it committed. Acknowledging before the work commits tells the library the
// consumer is healthy while the data is still in flight; a delivery that
// fails stays reserved (counted in Pending, against the queues) until it is
// acknowledged later or the session closes.
//
// Each helper takes envelopes of one session (ErrMixedSessions otherwise).
// Ephemeral envelopes are handed to the handler like the others but have
// nothing to acknowledge.

// ErrMixedSessions: a consume helper got envelopes of more than one session
// (delivery ids are per session).
var ErrMixedSessions = errors.New("echopubsub: envelopes of more than one session")

// ConsumeResult says what a consume helper acknowledged.
type ConsumeResult struct {
	// Acked is the number of deliveries acknowledged.
	Acked int
	// Unacked lists the durable deliveries left reserved (not committed),
	// in delivery-id order.
	Unacked []uint64
	// Unknown lists committed ids the session no longer held (already
	// acknowledged, or the session closed meanwhile).
	Unknown []uint64
}

// ConsumeDelivery runs handler on env and acknowledges env only when the
// handler returns nil. It returns the handler's error, or the Ack's.
func ConsumeDelivery(ps *PubSub, env *Envelope, handler func(*Envelope) error) error {
	if env == nil || handler == nil {
		return fmt.Errorf("echopubsub: ConsumeDelivery needs an envelope and a handler")
	}
	if err := handler(env); err != nil {
		return err
	}
	if env.Class != ClassDurable {
		return nil
	}
	_, err := ps.Ack(env.SessionID, env.DeliveryID)
	return err
}

// ConsumeMany hands envs to handler at once and acknowledges the delivery
// ids it returns as committed (those of envs; others are an error), even
// when it also returns an error (a partial commit). Everything else stays
// reserved.
func ConsumeMany(ps *PubSub, envs []*Envelope, handler func([]*Envelope) (committed []uint64, err error)) (ConsumeResult, error) {
	sid, err := oneSession(envs, handler == nil)
	if err != nil || len(envs) == 0 {
		return ConsumeResult{}, err
	}
	committed, herr := handler(envs)
	durable := map[uint64]bool{}
	for _, e := range envs {
		if e.Class == ClassDurable {
			durable[e.DeliveryID] = false
		}
	}
	var ack []uint64
	var errs []error
	for _, id := range committed {
		done, ok := durable[id]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("echopubsub: handler committed delivery %d, which is not a durable delivery of the batch", id))
		case !done:
			durable[id] = true
			ack = append(ack, id)
		}
	}
	res, aerr := ackAll(ps, sid, ack)
	for id, done := range durable {
		if !done {
			res.Unacked = append(res.Unacked, id)
		}
	}
	sort.Slice(res.Unacked, func(i, j int) bool { return res.Unacked[i] < res.Unacked[j] })
	return res, errors.Join(append([]error{herr, aerr}, errs...)...)
}

// ConsumeOrdered runs handler on envs in delivery-id order, stops at the
// first failure and acknowledges the prefix that succeeded. The failed
// delivery and those after it stay reserved.
func ConsumeOrdered(ps *PubSub, envs []*Envelope, handler func(*Envelope) error) (ConsumeResult, error) {
	sid, err := oneSession(envs, handler == nil)
	if err != nil || len(envs) == 0 {
		return ConsumeResult{}, err
	}
	sorted := byDeliveryID(envs)
	var ack []uint64
	var herr error
	i := 0
	for ; i < len(sorted); i++ {
		if herr = handler(sorted[i]); herr != nil {
			break
		}
		if sorted[i].Class == ClassDurable {
			ack = append(ack, sorted[i].DeliveryID)
		}
	}
	res, aerr := ackAll(ps, sid, ack)
	res.Unacked = durableIDs(sorted[i:])
	return res, errors.Join(herr, aerr)
}

// ConsumeProjection folds envs, in delivery-id order, into state with
// apply, stopping at the first failure; then commits the state with commit,
// and only when commit succeeds acknowledges everything applied. It
// returns the committed state, or state unchanged when nothing was applied
// or commit failed (then nothing is acknowledged).
func ConsumeProjection[S any](ps *PubSub, envs []*Envelope, state S, apply func(S, *Envelope) (S, error), commit func(S) error) (S, ConsumeResult, error) {
	sid, err := oneSession(envs, apply == nil || commit == nil)
	if err != nil || len(envs) == 0 {
		return state, ConsumeResult{}, err
	}
	sorted := byDeliveryID(envs)
	next := state
	var aerr error
	i := 0
	for ; i < len(sorted); i++ {
		s, err := apply(next, sorted[i])
		if err != nil {
			aerr = err
			break
		}
		next = s
	}
	if i == 0 {
		return state, ConsumeResult{Unacked: durableIDs(sorted)}, aerr
	}
	if err := commit(next); err != nil {
		return state, ConsumeResult{Unacked: durableIDs(sorted)}, errors.Join(aerr, fmt.Errorf("echopubsub: projection commit: %w", err))
	}
	res, kerr := ackAll(ps, sid, durableIDs(sorted[:i]))
	res.Unacked = durableIDs(sorted[i:])
	return next, res, errors.Join(aerr, kerr)
}

func oneSession(envs []*Envelope, nilHandler bool) (string, error) {
	if nilHandler {
		return "", fmt.Errorf("echopubsub: consume helper needs its handler functions")
	}
	sid := ""
	for i, e := range envs {
		if e == nil {
			return "", fmt.Errorf("echopubsub: envelope %d is nil", i)
		}
		if i > 0 && e.SessionID != sid {
			return "", fmt.Errorf("%w: %q and %q", ErrMixedSessions, sid, e.SessionID)
		}
		sid = e.SessionID
	}
	return sid, nil
}

func byDeliveryID(envs []*Envelope) []*Envelope {
	sorted := append([]*Envelope(nil), envs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].DeliveryID < sorted[j].DeliveryID })
	return sorted
}

func durableIDs(envs []*Envelope) []uint64 {
	var out []uint64
	for _, e := range envs {
		if e.Class == ClassDurable {
			out = append(out, e.DeliveryID)
		}
	}
	return out
}

// ackAll acknowledges ids in AckMany calls of at most MaxBatchItems.
func ackAll(ps *PubSub, sid string, ids []uint64) (ConsumeResult, error) {
	var res ConsumeResult
	max := ps.cfg.MaxBatchItems
	for len(ids) > 0 {
		n := min(len(ids), max)
		r, err := ps.AckMany(sid, ids[:n])
		if err != nil {
			return res, err
		}
		res.Acked += r.Acked
		res.Unknown = append(res.Unknown, r.Unknown...)
		ids = ids[n:]
	}
	return res, nil
}
