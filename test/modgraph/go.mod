module github.com/echopubsub/echopubsub/test/modgraph

go 1.25.0

require golang.org/x/mod v0.32.0
