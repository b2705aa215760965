// Package docref holds the test that every Go identifier the README,
// docs/*.md and the package docs name exists in this repository: a stale
// name in a doc is the first bug a newcomer hits. It parses the
// repository's Go files (every module's; no type-checking is needed to know
// what is declared) and resolves each reference written as code, such as
// `seglog.Open`, `PubSub.Broadcast`, `consul.Config.Token`,
// `internal/core.Runtime` and bare exported names such as `WithStore`.
//
// It also holds the test that the log keys in that source read right: no key
// built from data, and a unit in every duration key.
package docref
