package presence

import (
	"sort"
	"sync"
)

// Meta is one presence of a key in a topic: the node that tracks it, its
// unique ref (like Phoenix's phx_ref: a new one at every Track and Update)
// and its metadata. Meta is shared by List's callers and Diffs: do not
// modify the map.
type Meta struct {
	Node string
	Ref  string
	Meta map[string]string
}

// Diff is what a subscriber of a topic is sent when presences of that topic
// join or leave, keyed by presence key (Phoenix's presence_diff). An Update
// is a leave of the old ref and a join of the new one in the same Diff.
// Joins and leaves are by ref, so applying a Diff twice, or a Diff that
// repeats what List returned, changes nothing. Every subscriber of the
// topic gets the same *Diff: do not modify it.
type Diff struct {
	Topic  string
	Joins  map[string][]Meta
	Leaves map[string][]Meta
}

// entry is one presence in a tracker's view, local or a replica's.
type entry struct {
	node, topic, key, ref string
	meta                  map[string]string
}

func (e *entry) asMeta() Meta { return Meta{Node: e.node, Ref: e.ref, Meta: e.meta} }

// diffs collects, per topic, what one step of the tracker changed.
type diffs map[string]*Diff

func (d diffs) of(topic string) *Diff {
	df := d[topic]
	if df == nil {
		df = &Diff{Topic: topic, Joins: map[string][]Meta{}, Leaves: map[string][]Meta{}}
		d[topic] = df
	}
	return df
}

func (d diffs) join(e *entry) {
	df := d.of(e.topic)
	df.Joins[e.key] = append(df.Joins[e.key], e.asMeta())
}

func (d diffs) leave(e *entry) {
	df := d.of(e.topic)
	df.Leaves[e.key] = append(df.Leaves[e.key], e.asMeta())
}

// view is every presence the tracker knows, by topic. The tracker actor is
// its only writer; List reads it from any goroutine under mu.
type view struct {
	mu      sync.RWMutex
	byTopic map[string]map[string]*entry // topic -> ref -> entry
	count   int
}

func newView() *view { return &view{byTopic: map[string]map[string]*entry{}} }

// add and remove change the view and record the step in d. The caller holds
// mu for writing.
func (v *view) add(e *entry, d diffs) {
	refs := v.byTopic[e.topic]
	if refs == nil {
		refs = map[string]*entry{}
		v.byTopic[e.topic] = refs
	}
	refs[e.ref] = e
	v.count++
	d.join(e)
}

func (v *view) remove(e *entry, d diffs) {
	refs := v.byTopic[e.topic]
	if _, ok := refs[e.ref]; !ok {
		return
	}
	delete(refs, e.ref)
	if len(refs) == 0 {
		delete(v.byTopic, e.topic)
	}
	v.count--
	d.leave(e)
}

// list is List: topic's presences by key, each key's metas sorted by node
// and ref.
func (v *view) list(topic string) map[string][]Meta {
	v.mu.RLock()
	out := make(map[string][]Meta, len(v.byTopic[topic]))
	for _, e := range v.byTopic[topic] {
		out[e.key] = append(out[e.key], e.asMeta())
	}
	v.mu.RUnlock()
	for _, metas := range out {
		sortMetas(metas)
	}
	return out
}

func sortMetas(m []Meta) {
	sort.Slice(m, func(i, j int) bool {
		if m[i].Node != m[j].Node {
			return m[i].Node < m[j].Node
		}
		return m[i].Ref < m[j].Ref
	})
}
