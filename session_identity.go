package echopubsub

// WithIdentity records who a session acts for (for example the identity a
// Gateway's authentication hook returned), so that an authorizer given only
// a session id can look it up with SessionIdentity. Defaults to "".
func WithIdentity(identity string) SessionOption {
	return func(o *sessionOptions) { o.identity = identity }
}

// SessionIdentity returns the identity session id was opened with
// (WithIdentity); false when no session with this id is open on this node.
func (ps *PubSub) SessionIdentity(id string) (string, bool) {
	_, rec, err := ps.session(id)
	if err != nil {
		return "", false
	}
	return rec.identity, true
}
