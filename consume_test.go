package echopubsub_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// tenDeliveries opens a session on nd, delivers stamps 1..10 to it and
// returns its id and the envelopes (delivery id i carries stamp i).
func tenDeliveries(t *testing.T, nd *test.Node, topic string) (string, []*echopubsub.Envelope) {
	t.Helper()
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, []string{topic})
	for i := uint64(1); i <= 10; i++ {
		nd.Broadcast(t, topic, stamp(i))
	}
	waitEnvelopes(t, o, 10)
	return id, o.envelopes()
}

func seqOf(e *echopubsub.Envelope) uint64 { return e.Event.(*testpb.Stamp).Seq }

var errOdd = errors.New("odd items fail")

// stillReserved checks, with Ack, that exactly want are still reserved (and
// releases them).
func stillReserved(t *testing.T, ps *echopubsub.PubSub, id string, want []uint64) {
	t.Helper()
	if p := ps.Pending(id); p != len(want) {
		t.Fatalf("pending %d, want %d reserved (%v)", p, len(want), want)
	}
	for _, d := range want {
		if _, err := ps.Ack(id, d); err != nil {
			t.Fatalf("delivery %d should still be reserved: %v", d, err)
		}
	}
}

var odd = []uint64{1, 3, 5, 7, 9}

func TestConsumeHelpersAckOnlyWhatCommitted(t *testing.T) {
	nd := test.StartCluster(t, 1, sessionConfig(100, 200))[0]
	ps := nd.PS

	t.Run("ConsumeDelivery", func(t *testing.T) {
		id, envs := tenDeliveries(t, nd, "one")
		failed := 0
		for _, e := range envs {
			err := echopubsub.ConsumeDelivery(ps, e, func(e *echopubsub.Envelope) error {
				if seqOf(e)%2 == 1 {
					return errOdd
				}
				return nil
			})
			if err != nil {
				if !errors.Is(err, errOdd) {
					t.Fatal(err)
				}
				failed++
			}
		}
		if failed != 5 {
			t.Fatalf("%d failed", failed)
		}
		stillReserved(t, ps, id, odd)
	})

	t.Run("ConsumeMany", func(t *testing.T) {
		id, envs := tenDeliveries(t, nd, "many")
		res, err := echopubsub.ConsumeMany(ps, envs, func(batch []*echopubsub.Envelope) ([]uint64, error) {
			var committed []uint64
			for _, e := range batch {
				if seqOf(e)%2 == 0 {
					committed = append(committed, e.DeliveryID)
				}
			}
			return committed, errOdd
		})
		if !errors.Is(err, errOdd) || res.Acked != 5 || !equal(res.Unacked, odd) {
			t.Fatalf("ConsumeMany = %+v, %v", res, err)
		}
		stillReserved(t, ps, id, odd)
	})

	t.Run("ConsumeOrdered", func(t *testing.T) {
		id, envs := tenDeliveries(t, nd, "ordered")
		rand.Shuffle(len(envs), func(i, j int) { envs[i], envs[j] = envs[j], envs[i] })
		var order []uint64
		res, err := echopubsub.ConsumeOrdered(ps, envs, func(e *echopubsub.Envelope) error {
			order = append(order, e.DeliveryID)
			if e.DeliveryID == 6 {
				return errOdd
			}
			return nil
		})
		if !errors.Is(err, errOdd) || res.Acked != 5 || !equal(res.Unacked, []uint64{6, 7, 8, 9, 10}) || !equal(order, []uint64{1, 2, 3, 4, 5, 6}) {
			t.Fatalf("ConsumeOrdered = %+v, %v, handled %v", res, err, order)
		}
		stillReserved(t, ps, id, []uint64{6, 7, 8, 9, 10})
	})

	t.Run("ConsumeProjection", func(t *testing.T) {
		id, envs := tenDeliveries(t, nd, "projection")
		var committed []int
		apply := func(sum int, e *echopubsub.Envelope) (int, error) {
			if seqOf(e) == 6 {
				return sum, errOdd
			}
			return sum + int(seqOf(e)), nil
		}
		sum, res, err := echopubsub.ConsumeProjection(ps, envs, 100, apply, func(s int) error { committed = append(committed, s); return nil })
		if !errors.Is(err, errOdd) || sum != 115 || res.Acked != 5 || fmt.Sprint(committed) != "[115]" {
			t.Fatalf("ConsumeProjection = %d, %+v, %v (commits %v)", sum, res, err, committed)
		}
		stillReserved(t, ps, id, []uint64{6, 7, 8, 9, 10})

		// A failed commit acknowledges nothing.
		id, envs = tenDeliveries(t, nd, "projection2")
		errCommit := errors.New("disk full")
		sum, res, err = echopubsub.ConsumeProjection(ps, envs, 0, apply, func(int) error { return errCommit })
		if !errors.Is(err, errCommit) || sum != 0 || res.Acked != 0 || len(res.Unacked) != 10 {
			t.Fatalf("failed commit: %d, %+v, %v", sum, res, err)
		}
		stillReserved(t, ps, id, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	})

	t.Run("BadInput", func(t *testing.T) {
		_, a := tenDeliveries(t, nd, "mixed-a")
		_, b := tenDeliveries(t, nd, "mixed-b")
		ok := func([]*echopubsub.Envelope) ([]uint64, error) { return nil, nil }
		if _, err := echopubsub.ConsumeMany(ps, []*echopubsub.Envelope{a[0], b[0]}, ok); !errors.Is(err, echopubsub.ErrMixedSessions) {
			t.Fatalf("mixed sessions: %v", err)
		}
		if _, err := echopubsub.ConsumeOrdered(ps, a, nil); err == nil {
			t.Fatal("nil handler accepted")
		}
		if err := echopubsub.ConsumeDelivery(ps, nil, func(*echopubsub.Envelope) error { return nil }); err == nil {
			t.Fatal("nil envelope accepted")
		}
		res, err := echopubsub.ConsumeMany(ps, a[:2], func([]*echopubsub.Envelope) ([]uint64, error) { return []uint64{a[0].DeliveryID, 99}, nil })
		if err == nil || res.Acked != 1 {
			t.Fatalf("a committed id outside the batch: %+v, %v", res, err)
		}
	})
}
