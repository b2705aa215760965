package storetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// storeChildEnv makes this test binary a publisher process: it starts one
// node with the embedded store at the given path, and four goroutines
// broadcast durable Stamps, each printing "ack P SEQ" once Broadcast
// returned nil, until the process is killed.
const storeChildEnv = "ECHOPUBSUB_TEST_STORE_CHILD"

// Opener opens a node-local store at path (a file or a directory: the
// store's business), as a restarted process would.
type Opener func(path string) (echopubsub.Store, error)

// RunKillChild makes the test binary the publisher process of
// SurvivesKill9 when it was started as one: call it from the test
// package's init (it exits the process then, and returns otherwise).
func RunKillChild(open Opener) {
	if path := os.Getenv(storeChildEnv); path != "" {
		os.Exit(runStoreChild(path, open))
	}
}

func runStoreChild(path string, open Opener) int {
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	store, err := open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ps, err := echopubsub.Start(system, test.FastConfig(), echopubsub.WithLogger(log), echopubsub.WithStore(store),
		echopubsub.WithDurableTopics("room:1"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p string) {
			defer wg.Done()
			for seq := uint64(1); ; seq++ {
				if err := ps.Broadcast(nil, "room:1", &testpb.Stamp{Publisher: p, Seq: seq}); err != nil {
					fmt.Fprintln(os.Stderr, "child: broadcast:", err)
					return
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d\n", p, seq)
				_ = out.Flush() // printed only after Broadcast returned nil
				mu.Unlock()
			}
		}(fmt.Sprint("p", p))
	}
	wg.Wait()
	return 1
}

// SurvivesKill9: a publisher process (this test binary, see
// RunKillChild) is killed (SIGKILL) while its four publishers append to
// the store at path; every broadcast it acknowledged (its Broadcast
// returned nil) is there when it is reopened, in each publisher's order,
// with no hole in the cursors.
func SurvivesKill9(t *testing.T, path string, open Opener) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), storeChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{} // publisher -> highest seq acknowledged
	lines := bufio.NewScanner(stdout)
	n := 0
	deadline := time.Now().Add(20 * time.Second)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 3 || f[0] != "ack" {
			t.Fatalf("child printed %q", lines.Text())
		}
		seq, _ := strconv.ParseUint(f[2], 10, 64)
		acked[f[1]] = max(acked[f[1]], seq)
		if n++; n == 400 { // mid-appends: the publishers are still going
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("child acknowledged only %d broadcasts in 20s", n)
		}
	}
	_ = cmd.Wait() // killed: lines printed before the kill were all read above
	if n < 400 {
		t.Fatalf("child ended after %d acknowledgements, before the kill", n)
	}

	s, err := open(path)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored := map[string]uint64{} // publisher -> last seq stored
	var from uint64
	for {
		recs, next, err := s.Read(ctx, "room:1", from, 500)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Cursor != max(from, 1)+uint64(i) {
				t.Fatalf("cursor %d at position %d from %d: a hole", r.Cursor, i, from)
			}
			msg, err := messages.Decode(r.PayloadType, r.Payload)
			if err != nil {
				t.Fatalf("row %d: %v", r.Cursor, err)
			}
			st := msg.(*testpb.Stamp)
			if st.Seq != stored[st.Publisher]+1 {
				t.Fatalf("row %d: %s#%d after %s#%d", r.Cursor, st.Publisher, st.Seq, st.Publisher, stored[st.Publisher])
			}
			stored[st.Publisher] = st.Seq
		}
		if len(recs) == 0 {
			break
		}
		from = next
	}
	for p, seq := range acked {
		if stored[p] < seq {
			t.Fatalf("publisher %s: broadcast %d was acknowledged, the store holds up to %d", p, seq, stored[p])
		}
	}
	t.Logf("acknowledged %v; stored %v (rows past an acknowledgement were committed, not yet acknowledged)", acked, stored)
}
