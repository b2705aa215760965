// Package test is EchoPubSub's test kit: in-process clusters on loopback,
// fault injection, a collector actor, a delivery checker that states the
// guarantee as code, and polling helpers that fail at their deadline.
//
// It is imported by tests only; nothing in the library depends on it.
package test
